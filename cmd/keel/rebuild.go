package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/kv/client"
)

func newRebuildCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "rebuild -data-dir DIR -addr LIVE-MEMBER",
		Short: "Rebuild a stopped node whose Raft state is damaged or lost from its peers",
		Long: `Rebuild a stopped node whose Raft log is damaged, or whose Raft state is lost in
whole or in part (the log, raft.db, a snapshot; its agent refuses to start and says
so), from its peers. Through the live member at -addr the cluster removes the node
from the Raft configuration; once that is committed, the node's Raft state moves to
DIR/damaged-<time>/ (kept, never deleted) and DIR is marked to rejoin. Then start the
agent as before: it rejoins as a non-voter, catches up from a snapshot and the log, and
is promoted to voter once caught up. The cluster needs a quorum without this node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("rebuild: -data-dir is required")
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				rec, err := agent.Rebuild(ctx, dataDir, c, time.Now())
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "node %s removed from the raft configuration\n", rec.NodeID)
				if rec.MovedTo != "" {
					fmt.Fprintf(out, "its raft state moved to %s\n", rec.MovedTo)
				} else {
					fmt.Fprintf(out, "it had no raft state to move aside\n")
				}
				fmt.Fprintf(out, "start the agent as before: it rejoins as a non-voter and is promoted once caught up\n")
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "data dir of the stopped node to rebuild")
	return cmd
}
