package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

func newGetCmd() *cobra.Command {
	var (
		prefix, serializable, inconsistent bool
		revision                           int64
		limit                              int
	)
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Read a key, or every key under a prefix with --prefix",
		Long: `Read a key, or page through every key under a prefix.

  keel get config/db            the value
  keel get config/db -o json    the full record (revisions, version)
  keel get config/ --prefix     every key under config/, page by page at one revision
  keel get config/ --prefix -o json   one JSON object per line (JSON lines)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			if prefix {
				return listPrefix(cmd, c, args[0], client.PagerOptions{
					Limit: limit, Revision: revision, Serializable: serializable, AllowInconsistent: inconsistent,
				})
			}
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			var opts []client.GetOption
			if revision > 0 {
				opts = append(opts, client.WithRevision(revision))
			}
			if serializable {
				opts = append(opts, client.WithSerializable())
			}
			resp, err := c.Get(ctx, args[0], opts...)
			if err != nil {
				return err
			}
			if structured() {
				return printValue(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", resp.Value)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&prefix, "prefix", false, "read every key starting with KEY, page by page")
	f.BoolVar(&serializable, "serializable", false, "answer from the node's local state (may be stale)")
	f.BoolVar(&inconsistent, "allow-inconsistent", true, "with --prefix: if the scan's revision is compacted, go on at the latest revision")
	f.Int64Var(&revision, "revision", 0, "read at this revision (0 = latest)")
	f.IntVar(&limit, "limit", 1000, "with --prefix: keys per page")
	return cmd
}

// listPrefix pages through a prefix, printing "key value" lines (or JSON lines) and a
// progress line on stderr. A scan has no overall deadline, only each page.
func listPrefix(cmd *cobra.Command, c *client.Client, prefix string, opts client.PagerOptions) error {
	p := c.NewPager(prefix, opts)
	out := cmd.OutOrStdout()
	prog := newProgress(os.Stderr, "keys")
	defer prog.finish()
	for !p.Done() {
		ctx, cancel := withTimeout(cmd)
		items, err := p.Next(ctx)
		cancel()
		if err != nil {
			return err
		}
		for _, kv := range items {
			if err := printKV(out, kv); err != nil {
				return err
			}
		}
		prog.add(len(items))
	}
	if p.Inconsistent() {
		fmt.Fprintln(os.Stderr, "note: the scan's revision was compacted; later pages were read at a newer revision")
	}
	return nil
}

// printKV prints one item of a scan: "key<TAB>value", or with -o json one JSON object
// per line (JSON lines, as keel watch -o json), or with -o yaml one YAML list item.
func printKV(w io.Writer, kv api.KV) error {
	if structured() {
		return printValueLine(w, kv)
	}
	_, err := fmt.Fprintf(w, "%s\t%s\n", kv.Key, kv.Value)
	return err
}

func newPutCmd() *cobra.Command {
	var prevRevision, lease int64
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE]",
		Short: "Write a key (VALUE, or standard input when omitted)",
		Long: `Write a key.

  keel put config/db postgres://db:5432
  keel put config/db --prev-revision 7 new   compare-and-swap: only if mod revision is 7
  keel put lock/x --prev-revision 0 me        create only
  cat big.json | keel put config/big`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			var value []byte
			if len(args) == 2 {
				value = []byte(args[1])
			} else if value, err = io.ReadAll(cmd.InOrStdin()); err != nil {
				return fmt.Errorf("read value from stdin: %w", err)
			}
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			var rev int64
			switch {
			case cmd.Flags().Changed("lease") && cmd.Flags().Changed("prev-revision"):
				return errors.New("--lease and --prev-revision cannot be combined (use keel txn)")
			case cmd.Flags().Changed("lease"):
				rev, err = c.PutLease(ctx, args[0], value, lease)
			case cmd.Flags().Changed("prev-revision"):
				rev, err = c.PutCAS(ctx, args[0], value, prevRevision)
			default:
				rev, err = c.Put(ctx, args[0], value)
			}
			if err != nil {
				return err
			}
			return printRevision(cmd, rev)
		},
	}
	cmd.Flags().Int64Var(&prevRevision, "prev-revision", 0, "compare-and-swap on the key's mod revision (0 = create only)")
	cmd.Flags().Int64Var(&lease, "lease", 0, "attach the key to this lease (keel lease grant)")
	return cmd
}

func newDelCmd() *cobra.Command {
	var (
		prefix       bool
		prevRevision int64
	)
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete"},
		Short:   "Delete a key, or every key under a prefix with --prefix",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				var resp *api.DeleteResponse
				var err error
				switch {
				case prefix:
					resp, err = c.DeletePrefix(ctx, args[0])
				case cmd.Flags().Changed("prev-revision"):
					resp, err = c.DeleteCAS(ctx, args[0], prevRevision)
				default:
					resp, err = c.Delete(ctx, args[0])
				}
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), resp)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "deleted %d (revision %d)\n", resp.Deleted, resp.Revision)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&prefix, "prefix", false, "delete every key starting with KEY")
	cmd.Flags().Int64Var(&prevRevision, "prev-revision", 0, "compare-and-swap on the key's mod revision")
	return cmd
}

func printRevision(cmd *cobra.Command, rev int64) error {
	if structured() {
		return printValue(cmd.OutOrStdout(), api.PutResponse{Revision: rev})
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "revision %d\n", rev)
	return err
}

// progress prints a one-line, rate-limited progress report for long scans.
type progress struct {
	w     io.Writer
	unit  string
	n     int
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer, unit string) *progress {
	now := time.Now()
	return &progress{w: w, unit: unit, start: now, last: now}
}

func (p *progress) add(n int) {
	p.n += n
	if time.Since(p.last) >= 250*time.Millisecond {
		p.last = time.Now()
		p.print("\r")
	}
}

func (p *progress) print(end string) {
	secs := time.Since(p.start).Seconds()
	if secs <= 0 {
		secs = 1e-9
	}
	fmt.Fprintf(p.w, "%s%d %s read (%.0f/s)   ", end, p.n, p.unit, float64(p.n)/secs)
}

func (p *progress) finish() {
	if time.Since(p.start) >= 250*time.Millisecond {
		p.print("\r")
		fmt.Fprintln(p.w)
	}
}
