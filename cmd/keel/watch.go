package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

func newWatchCmd() *cobra.Command {
	var (
		key, prevKV, progress, requireLeader bool
		revision                             int64
	)
	cmd := &cobra.Command{
		Use:   "watch PREFIX",
		Short: "Print every change under a prefix, one line per event, until interrupted",
		Long: `Print every change under a prefix (or to one key with --key), in revision order,
one line per event: "REVISION PUT key value" or "REVISION DELETE key". The watch
resumes by itself on another node (from -addr) when its node fails, or loses contact
with the leader (--require-leader, on by default). It has no deadline (-timeout does
not apply); stop it with Ctrl-C.

  keel watch config/                 changes from now on
  keel watch config/ --revision 42   changes from revision 42 on (replayed from history)
  keel watch config/ -o json         one JSON event per line`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			noteFutureRevision(ctx, c, cmd.ErrOrStderr(), revision)
			for ev := range c.Watch(ctx, args[0], client.WatchOptions{Key: key, StartRevision: revision, PrevKV: prevKV,
				RequireLeader: requireLeader}) {
				switch {
				case ev.Err != nil:
					if ctx.Err() != nil {
						return nil
					}
					return ev.Err
				case ev.Type == api.EventProgress && !progress:
				case structured():
					line := api.WatchEvent{Type: ev.Type, Revision: ev.Revision, PrevKV: ev.PrevKV}
					if ev.Type != api.EventProgress {
						line.KV = &ev.KV
					}
					if err := printValueLine(out, line); err != nil {
						return err
					}
				case ev.Type == api.EventPut:
					fmt.Fprintf(out, "%d PUT %s %s\n", ev.Revision, ev.KV.Key, ev.KV.Value)
				case ev.Type == api.EventDelete:
					fmt.Fprintf(out, "%d DELETE %s\n", ev.Revision, ev.KV.Key)
				default:
					fmt.Fprintf(out, "%d PROGRESS\n", ev.Revision)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&key, "key", false, "watch the exact key, not the prefix")
	f.BoolVar(&prevKV, "prev-kv", false, "with -o json: include each key's previous version")
	f.BoolVar(&progress, "progress", false, "also print progress lines (the revision the watch is up to date with)")
	f.BoolVar(&requireLeader, "require-leader", true, "move off a node that loses contact with the leader instead of falling behind with it")
	f.Int64Var(&revision, "revision", 0, "first revision to print (0 = after the latest); must be above the compact revision")
	return cmd
}

// noteFutureRevision says so when a watch starts beyond the next revision: it waits,
// silent, until the cluster gets there, which looks like a hang.
func noteFutureRevision(ctx context.Context, c *client.Client, w io.Writer, start int64) {
	if start <= 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, global.timeout)
	defer cancel()
	st, err := c.Status(sctx)
	if err != nil || start <= st.Revision+1 {
		return // the watch itself reports what is wrong
	}
	fmt.Fprintf(w, "note: revision %d is in the future: the current revision is %d; "+
		"the watch prints nothing until the cluster reaches revision %d\n", start, st.Revision, start)
}
