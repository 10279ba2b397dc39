package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

func newLeaveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "leave",
		Short: "Make the node at -addr leave the cluster gracefully, then stop",
		Long: `Make the node at -addr leave the cluster gracefully: a leader hands leadership
over first, the node leaves the Raft configuration, announces its departure by gossip,
and its process exits. Its data dir can then be removed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				id, err := c.Leave(ctx)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node %s left the cluster\n", id)
				return nil
			})
		},
	}
}

func newRemovePeerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove-peer ID",
		Short: "Remove a server from the Raft configuration (it stops voting at once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.RemovePeer(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
				return nil
			})
		},
	}
}

func newTransferLeaderCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "transfer-leader [ID]",
		Short: "Hand leadership to ID, or to the most up-to-date voter",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			c, err := newClient()
			if err != nil {
				return err
			}
			if err := c.TransferLeader(ctx, id); err != nil {
				return transferError(ctx, c, id, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "leadership transferred")
			return nil
		},
	}
}

func newMembersCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "members",
		Short: "List the cluster's servers: addresses, gossip status, suffrage, leader, lag, release",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				members, err := c.Members(ctx)
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), api.MembersResponse{Members: members})
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tRAFT\tHTTP\tGOSSIP\tSUFFRAGE\tLEADER\tAPPLIED\tTRAILING\tLAST CHANGE\tRELEASE")
				for _, m := range members {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%d\t%d\t%s\t%s\n", m.ID, dash(m.RaftAddr), dash(m.HTTPAddr),
						m.Gossip, m.Suffrage, m.Leader, m.AppliedIdx, m.TrailingBy, dash(m.LastContact), dash(m.Release))
				}
				return tw.Flush()
			})
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// transferError names what is wrong with ID when the cluster refuses to hand it
// leadership: not a member at all, or a member that cannot lead (a non-voter).
func transferError(ctx context.Context, c *client.Client, id string, err error) error {
	if id == "" || !client.IsBadRequest(err) {
		return err
	}
	members, merr := c.Members(ctx)
	if merr != nil {
		return err
	}
	var voters []string
	for _, m := range members {
		if m.ID == id && m.Suffrage != "Voter" {
			return fmt.Errorf("transfer-leader: %s is a member but not a voter (%s): only a voter can lead", id, m.Suffrage)
		}
		if m.ID == id {
			return err // a voter the cluster still refused: its message says why
		}
		if m.Suffrage == "Voter" {
			voters = append(voters, m.ID)
		}
	}
	return fmt.Errorf("transfer-leader: %s is not a voter of this cluster (voters: %s; keel members lists them)",
		id, strings.Join(voters, ", "))
}
