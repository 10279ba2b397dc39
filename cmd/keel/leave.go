package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
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
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			addr := strings.TrimSpace(strings.Split(global.addr, ",")[0])
			if !strings.Contains(addr, "://") {
				addr = "http://" + addr
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, addr+"/v1/agent/leave", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			var out struct {
				NodeID  string `json:"node_id"`
				Message string `json:"message"`
			}
			json.Unmarshal(body, &out)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("leave: %s: %s", resp.Status, out.Message)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s left the cluster\n", out.NodeID)
			return nil
		},
	}
}
