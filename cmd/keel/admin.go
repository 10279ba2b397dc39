package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

func newTxnCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "txn -f FILE",
		Short: "Run a transaction from a JSON file (- = stdin), as POST /v1/txn takes it",
		Long: `Run a transaction: compares, then the success ops if all hold, else the failure ops.

  {"compare":[{"key":"leader","target":"exists","result":"equal","int":0}],
   "success":[{"type":"put","key":"leader","value":"bjE="}],
   "failure":[{"type":"get","key":"leader"}]}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := cmd.InOrStdin()
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			var req api.TxnRequest
			dec := json.NewDecoder(in)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return fmt.Errorf("txn %s: %w", file, err)
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				resp, err := c.Txn(ctx, &req)
				if err != nil {
					return err
				}
				return printValue(cmd.OutOrStdout(), resp)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "-", "transaction JSON file, - for stdin")
	return cmd
}

func newCompactCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compact REVISION",
		Short: "Discard history at and below REVISION (reads below it then get 410)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rev, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || rev <= 0 {
				return fmt.Errorf("compact: %q is not a positive revision", args[0])
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				resp, err := c.Compact(ctx, rev)
				if err != nil {
					return compactError(ctx, c, rev, err)
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), resp)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "compacted at revision %d (current revision %d)\n", resp.CompactRevision, resp.Revision)
				return err
			})
		},
	}
}

func newStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the answering node's view of the cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), st)
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				if st.Restricted {
					// ACLs are enforced and no token was given: the node told only this.
					fmt.Fprintln(w, "node\tnot shown: give a token (-token or KEEL_TOKEN) to see the node, its leader and members")
				} else {
					fmt.Fprintf(w, "node\t%s (%s)\n", st.NodeID, st.State)
					fmt.Fprintf(w, "leader\t%s %s\n", st.LeaderID, st.LeaderAddr)
					fmt.Fprintf(w, "term\t%d\n", st.Term)
					fmt.Fprintf(w, "revision\t%d (compacted at %d)\n", st.Revision, st.CompactRevision)
					fmt.Fprintf(w, "raft index\tapplied %d, commit %d, last %d\n", st.AppliedIndex, st.CommitIndex, st.LastLogIndex)
				}
				switch {
				case st.TLS:
					fmt.Fprintln(w, "security\tTLS on every port")
				case st.Insecure:
					fmt.Fprintln(w, "security\tINSECURE: plain text, no TLS (-insecure or -dev)")
				}
				if st.ACL != nil {
					state := "not bootstrapped (keel acl bootstrap)"
					if st.ACL.Bootstrapped {
						state = "bootstrapped: tokens required"
					}
					fmt.Fprintf(w, "acl\t%s; default %s\n", state, st.ACL.Default)
				}
				if st.Restricted {
					return w.Flush()
				}
				fmt.Fprintln(w, "\nMEMBER\tADDRESS\tSUFFRAGE\tLEADER")
				for _, m := range st.Members {
					fmt.Fprintf(w, "%s\t%s\t%s\t%v\n", m.ID, m.Address, m.Suffrage, m.Leader)
				}
				return w.Flush()
			})
		},
	}
}

// compactError says, for a revision at or below the compact revision or above the
// current one, what the cluster's window is: there is nothing to do below it, and
// nothing to compact above it yet.
func compactError(ctx context.Context, c *client.Client, rev int64, err error) error {
	var e *client.Error
	if !errors.As(err, &e) || (e.Code != http.StatusGone && e.Reason != api.ReasonFutureRevision) {
		return err
	}
	st, serr := c.Status(ctx)
	if serr != nil {
		return err
	}
	if e.Code == http.StatusGone {
		e.Message = fmt.Sprintf("revision %d is already compacted: the compact revision is %d (current revision %d); nothing to do",
			rev, st.CompactRevision, st.Revision)
	} else {
		e.Message = fmt.Sprintf("revision %d is in the future: the current revision is %d (compacted at %d)",
			rev, st.Revision, st.CompactRevision)
	}
	return e
}
