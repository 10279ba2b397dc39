package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// agentCall sends one operator request to the first node of -addr that answers and
// decodes its JSON answer into out. A JSON error body becomes the returned error.
func agentCall(ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return err
		}
	}
	var lastErr error
	for _, addr := range strings.Split(global.addr, ",") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		if !strings.Contains(addr, "://") {
			addr = "http://" + addr
		}
		req, err := http.NewRequestWithContext(ctx, method, addr+path, bytes.NewReader(payload))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			lastErr = err
			continue // try the next node
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			var e struct{ Message string }
			json.Unmarshal(data, &e)
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, e.Message)
		}
		if out != nil {
			return json.Unmarshal(data, out)
		}
		return nil
	}
	if lastErr == nil {
		lastErr = errors.New("no address in -addr")
	}
	return lastErr
}

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
			var out struct {
				NodeID string `json:"node_id"`
			}
			if err := agentCall(ctx, http.MethodPost, "/v1/agent/leave", nil, &out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s left the cluster\n", out.NodeID)
			return nil
		},
	}
}

func newRemovePeerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "remove-peer ID",
		Short: "Remove a server from the Raft configuration (it stops voting at once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			if err := agentCall(ctx, http.MethodDelete, "/v1/agent/peers/"+args[0], nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
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
			if err := agentCall(ctx, http.MethodPost, "/v1/agent/transfer-leader", map[string]string{"id": id}, nil); err != nil {
				return err
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
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			var out struct {
				Members []struct {
					ID          string `json:"id"`
					RaftAddr    string `json:"raft_addr"`
					HTTPAddr    string `json:"http_addr"`
					Gossip      string `json:"gossip"`
					Suffrage    string `json:"suffrage"`
					Leader      bool   `json:"leader"`
					Release     string `json:"release"`
					Applied     uint64 `json:"applied_index"`
					TrailingBy  uint64 `json:"trailing_by"`
					LastContact string `json:"last_contact"`
				} `json:"members"`
			}
			if err := agentCall(ctx, http.MethodGet, "/v1/agent/members", nil, &out); err != nil {
				return err
			}
			if global.output == "json" {
				return printJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tRAFT\tHTTP\tGOSSIP\tSUFFRAGE\tLEADER\tAPPLIED\tTRAILING\tLAST CHANGE\tRELEASE")
			for _, m := range out.Members {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%d\t%d\t%s\t%s\n", m.ID, dash(m.RaftAddr), dash(m.HTTPAddr),
					m.Gossip, m.Suffrage, m.Leader, m.Applied, m.TrailingBy, dash(m.LastContact), dash(m.Release))
			}
			return tw.Flush()
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
