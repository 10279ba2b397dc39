package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// phaseNames says what each phase of a key migration does (RFD 126).
var phaseNames = [...]string{
	"old keys only",
	"writes to old and new keys, reads from old",
	"writes to both, reads from new with fallback to old",
	"as 2, plus the leader copies every old key to the new range",
	"new keys only",
	"new keys only, the leader deletes the old keys",
}

func newKeyMigrateCmd() *cobra.Command {
	kc := &cobra.Command{Use: "keymigrate", Short: "Phased key migrations (RFD 126): status, advance, rollback"}
	var watch bool
	status := &cobra.Command{
		Use:   "status [NAME] [--watch]",
		Short: "Show each key migration's phase, work, key counts and members",
		Long: `Show each key migration's phase, the progress of its background work (copy in phase 3,
delete in phase 5, copy back during a rollback from 4), the keys in its old and new
ranges, the phase every member applies, and why advance would be refused now.
With --watch, redraw a progress bar every second until Ctrl-C.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				return watchKeyMigrations(cmd, args)
			}
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			sts, err := fetchKeyMigrations(ctx, args)
			if err != nil {
				return err
			}
			if structured() {
				return printValue(cmd.OutOrStdout(), sts)
			}
			if len(sts) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no key migrations: declare keyMigrations under a resource of the schema")
			}
			for i := range sts {
				printKeyMigration(cmd.OutOrStdout(), &sts[i])
			}
			return nil
		},
	}
	status.Flags().BoolVarP(&watch, "watch", "w", false, "redraw a progress bar every second until Ctrl-C")
	kc.AddCommand(status, newKeyStepCmd("advance"), newKeyStepCmd("rollback"))
	return kc
}

func fetchKeyMigrations(ctx context.Context, args []string) ([]api.KeyMigrationStatus, error) {
	c, err := newClient()
	if err != nil {
		return nil, err
	}
	if len(args) == 1 {
		st, err := c.KeyMigration(ctx, args[0])
		if err != nil {
			return nil, err
		}
		return []api.KeyMigrationStatus{*st}, nil
	}
	return c.KeyMigrations(ctx)
}

// waitAdvanced waits, at most waitFor, until every member applies the phase rec took.
func waitAdvanced(cmd *cobra.Command, c *client.Client, rec *api.KeyPhaseRecord, waitFor time.Duration) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), waitFor)
	defer cancel()
	fetch := func(ctx context.Context) (*api.KeyMigrationStatus, error) { return c.KeyMigration(ctx, rec.Name) }
	if err := waitPhaseApplied(ctx, fetch, rec.Phase, 200*time.Millisecond); err != nil {
		return fmt.Errorf("keymigrate advance: phase %d taken, but not yet applied by every member after %v: %w",
			rec.Phase, waitFor, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: every member applies phase %d\n", rec.Name, rec.Phase)
	return nil
}

func newKeyStepCmd(step string) *cobra.Command {
	var to int
	var by string
	var wait bool
	var waitFor time.Duration
	cmd := &cobra.Command{
		Use:  step + " NAME --to N",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			if by == "" {
				by = whoAmI()
			}
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			var rec *api.KeyPhaseRecord
			if step == "advance" {
				var target *int
				if cmd.Flags().Changed("to") {
					target = &to
				}
				rec, err = c.AdvanceKeyMigration(ctx, args[0], target, by)
			} else {
				if !cmd.Flags().Changed("to") {
					return fmt.Errorf("keymigrate rollback: --to N is required (the phase to go back to)")
				}
				rec, err = c.RollbackKeyMigration(ctx, args[0], to, by)
			}
			if err != nil {
				return err
			}
			if structured() {
				return printValue(cmd.OutOrStdout(), rec)
			}
			if rec.RollbackTo != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: rolling back to phase %d: the leader copies the new keys back to "+
					"the old ones, then switches (phase 4 until then)\n", rec.Name, *rec.RollbackTo)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: phase %d (%s)\n", rec.Name, rec.Phase, phaseNames[rec.Phase])
			if step != "advance" || !wait {
				return nil
			}
			return waitAdvanced(cmd, c, rec, waitFor)
		},
	}
	if step == "advance" {
		cmd.Use = step + " NAME [--to N]"
		cmd.Short = "Move a key migration one phase forward (refused, exit status 3, unless the cluster agrees)"
		cmd.Flags().IntVar(&to, "to", 0, "the target phase, checked to be the next one (default: the next one)")
		cmd.Flags().BoolVar(&wait, "wait", true, "after the step, wait until every member applies the new phase, "+
			"so that the next advance is not refused; --wait=false returns once the step is taken, in scripts too")
		cmd.Flags().DurationVar(&waitFor, "wait-timeout", time.Minute, "how long --wait waits at most")
	} else {
		cmd.Short = "Move a key migration back to phase N (from 4 after copying the new keys back)"
		cmd.Flags().IntVar(&to, "to", 0, "the phase to go back to (required)")
	}
	cmd.Flags().StringVar(&by, "by", "", "who asks, recorded with the transition (default USER@HOST)")
	return cmd
}

// waitPhaseApplied polls the status until every member applies phase (each node ok in
// it), or ctx ends: then the error names who still lags.
func waitPhaseApplied(ctx context.Context, fetch func(context.Context) (*api.KeyMigrationStatus, error), phase int,
	poll time.Duration) error {
	why := "no answer yet"
	for {
		st, err := fetch(ctx)
		switch {
		case err != nil:
			why = err.Error()
		case st.Phase != phase:
			return fmt.Errorf("the phase moved on to %d meanwhile", st.Phase)
		default:
			if why = phaseLaggards(st); why == "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s", why)
		case <-time.After(poll):
		}
	}
}

// phaseLaggards says which members do not apply st.Phase yet ("" = none does not).
func phaseLaggards(st *api.KeyMigrationStatus) string {
	if len(st.Nodes) == 0 {
		return "no member's phase is known"
	}
	var lag []string
	for _, n := range st.Nodes {
		if n.Status != "ok" || n.Phase != st.Phase {
			lag = append(lag, fmt.Sprintf("%s %s (phase %d)", n.NodeID, n.Status, n.Phase))
		}
	}
	if len(lag) == 0 {
		return ""
	}
	return "waiting for " + strings.Join(lag, ", ")
}

// whoAmI is USER@HOST, for the transition record.
func whoAmI() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

func printKeyMigration(w io.Writer, st *api.KeyMigrationStatus) {
	fmt.Fprintf(w, "%s  %s  %s -> %s\n", st.Name, st.Resource, st.From, st.To)
	phase := fmt.Sprintf("phase %d: %s", st.Phase, phaseNames[st.Phase])
	if st.RollbackTo != nil {
		phase += fmt.Sprintf(" (rolling back to %d: writes to both, reads from new, copying new keys back)", *st.RollbackTo)
	}
	fmt.Fprintf(w, "  %s\n", phase)
	if wk := st.Work; wk != nil {
		fmt.Fprintf(w, "  %s %s: %d/%d scanned, %d written, %d skipped", wk.Kind, wk.State, wk.Scanned,
			wk.Total, wk.Written, wk.Skipped)
		if wk.State == "Running" {
			if wk.KeysPerSecond > 0 {
				fmt.Fprintf(w, ", %.0f keys/s, ETA %s", wk.KeysPerSecond, eta(wk.ETASeconds, wk.KeysPerSecond, wk.Updated))
			}
		} else {
			fmt.Fprintf(w, ", %d left (exact)", wk.Left)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  keys: old %d, new %d\n", st.OldKeys, st.NewKeys)
	var nodes []string
	for _, n := range st.Nodes {
		if n.Phase >= 0 {
			nodes = append(nodes, fmt.Sprintf("%s phase %d %s", n.NodeID, n.Phase, n.Status))
		} else {
			nodes = append(nodes, fmt.Sprintf("%s %s", n.NodeID, n.Status))
		}
	}
	if len(nodes) > 0 {
		fmt.Fprintf(w, "  nodes: %s\n", strings.Join(nodes, ", "))
	}
	if l := st.Last; l != nil {
		fmt.Fprintf(w, "  last: %s %d -> %d by %s at %s\n", l.Kind, l.From, l.To, l.By, l.At.Local().Format(time.DateTime))
	}
	if st.NextBlocked != "" {
		fmt.Fprintf(w, "  advance: refused now: %s\n", st.NextBlocked)
	} else {
		fmt.Fprintf(w, "  advance: to phase %d would be taken\n", st.Phase+1)
	}
}

// keyProgressLine renders one key migration as a progress line:
//
//	widgets-v2-keys  3 copy [#########...........]  45% 4.5k/10k 512/s ETA 11s
func keyProgressLine(st *api.KeyMigrationStatus, width int) string {
	const barWidth = 20
	line := fmt.Sprintf("%-16s %d", fitLine(st.Name, 16), st.Phase)
	wk := st.Work
	if wk == nil {
		return fitLine(line+" (no background work in this phase)", width)
	}
	done, total := wk.Scanned, wk.Total
	if wk.State == "Done" {
		done = total
	}
	frac := 0.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	} else if wk.State == "Done" {
		frac = 1
	}
	fill := int(frac * barWidth)
	line += fmt.Sprintf(" %s [%s%s] %3.0f%% %s/%s", wk.Kind, strings.Repeat("#", fill), strings.Repeat(".", barWidth-fill),
		frac*100, human(min(done, total)), human(total))
	if wk.State == "Running" {
		line += " " + rateETA(wk.KeysPerSecond, wk.ETASeconds, wk.Updated)
	} else {
		line += " " + wk.State
	}
	return fitLine(line, width)
}

// watchKeyMigrations prints a progress line per key migration every second until Ctrl-C.
func watchKeyMigrations(cmd *cobra.Command, args []string) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	w := cmd.OutOrStdout()
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		sts, err := fetchKeyMigrations(rctx, args)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			fmt.Fprintln(w, fitLine("error: "+err.Error(), progressWidth))
		}
		for i := range sts {
			fmt.Fprintln(w, keyProgressLine(&sts[i], progressWidth))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
