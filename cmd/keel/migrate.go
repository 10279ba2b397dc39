package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/migrate"
)

func newMigrateCmd() *cobra.Command {
	mc := &cobra.Command{Use: "migrate", Short: "Storage-version migrations: status, start, abort, settings"}
	var watch bool
	status := &cobra.Command{
		Use:   "status [--watch]",
		Short: "Show, per resource, the migration of stored objects into the common encoding version",
		Long: `Show, per resource, the migration of stored objects into the common encoding version.
With --watch, draw a progress bar per resource, refreshed every second, until Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if watch {
				return watchMigrations(cmd)
			}
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			migs, err := fetchMigrations(ctx)
			if err != nil {
				return err
			}
			if structured() {
				return printValue(cmd.OutOrStdout(), migs)
			}
			printMigrations(cmd.OutOrStdout(), migs)
			return nil
		},
	}
	status.Flags().BoolVarP(&watch, "watch", "w", false, "redraw a progress bar per resource every second until Ctrl-C")
	mc.AddCommand(status, migrateActionCmd("start", "Start (or resume) the migration of GROUP/RESOURCE now", true),
		migrateActionCmd("abort", "Abort the running migration of GROUP/RESOURCE, keeping its checkpoint", false),
		newMigrateSettingsCmd())
	return mc
}

func fetchMigrations(ctx context.Context) ([]api.MigrationStatus, error) {
	c, err := newClient()
	if err != nil {
		return nil, err
	}
	return c.Migrations(ctx)
}

func migrateActionCmd(use, short string, start bool) *cobra.Command {
	return &cobra.Command{
		Use:   use + " GROUP/RESOURCE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g, r, ok := strings.Cut(args[0], "/"); !ok || g == "" || r == "" || strings.Contains(r, "/") {
				return fmt.Errorf("migrate %s: %q: want GROUP/RESOURCE, e.g. apps/widgets", use, args[0])
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				op := c.AbortMigration
				if start {
					op = c.StartMigration
				}
				st, err := op(ctx, args[0])
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), st)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", st.Resource, describeMigration(st))
				return nil
			})
		},
	}
}

func newMigrateSettingsCmd() *cobra.Command {
	var auto bool
	var rate int
	cmd := &cobra.Command{
		Use:   "settings [--auto=true|false] [--rate N]",
		Short: "Show or change the cluster-wide migration settings",
		Long: `Show or change the cluster-wide migration settings, stored in the cluster (Raft):

  auto   the leader starts a migration by itself once every node writes the common
         encoding version (off: only 'keel migrate start' does; a running one goes on)
  rate   objects rewritten per second at most (-1: unlimited)

Until first changed they come from the leader's -no-migrate and -migrate-rate flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				s, err := c.MigrationSettings(ctx)
				if err != nil {
					return err
				}
				if cmd.Flags().Changed("auto") || cmd.Flags().Changed("rate") {
					if cmd.Flags().Changed("auto") {
						s.Auto = auto
					}
					if cmd.Flags().Changed("rate") {
						s.Rate = rate
					}
					if err := migrate.ValidateSettings(s); err != nil {
						return err
					}
					if err := c.SetMigrationSettings(ctx, s); err != nil {
						return err
					}
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), s)
				}
				r := fmt.Sprintf("%d objects/s", s.Rate)
				if s.Rate < 0 {
					r = "unlimited"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "auto: %v\nrate: %s\n", s.Auto, r)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&auto, "auto", true, "start migrations automatically")
	cmd.Flags().IntVar(&rate, "rate", 500, "objects per second at most (-1: unlimited)")
	return cmd
}

func printMigrations(w io.Writer, migs []api.MigrationStatus) {
	if len(migs) == 0 {
		fmt.Fprintln(w, "no resources: start the agents with -schema FILE")
	}
	for _, m := range migs {
		fmt.Fprintf(w, "%s: %s\n", m.Resource, describeMigration(&m))
		for _, p := range m.Poison {
			fmt.Fprintf(w, "  cannot convert %q: %s\n", p.Key, p.Error)
		}
	}
}

// watchMigrations redraws a progress bar per resource every second until Ctrl-C.
// On a terminal each frame replaces the previous one; otherwise frames follow each
// other, separated by a blank line.
func watchMigrations(cmd *cobra.Command) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	w := cmd.OutOrStdout()
	tty := isTerminal(w)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	drawn := 0
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		migs, err := fetchMigrations(rctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		var lines []string
		if err != nil {
			lines = []string{fitLine("error: "+err.Error(), progressWidth)}
		} else {
			lines = progressLines(migs, progressWidth)
		}
		switch {
		case tty && drawn > 0:
			fmt.Fprintf(w, "\x1b[%dA", drawn)
		case !tty && drawn > 0:
			fmt.Fprintln(w)
		}
		for _, l := range lines {
			if tty {
				fmt.Fprint(w, "\x1b[2K")
			}
			fmt.Fprintln(w, l)
		}
		if tty && len(lines) < drawn { // clear what the previous frame had below
			for range drawn - len(lines) {
				fmt.Fprintln(w, "\x1b[2K")
			}
			fmt.Fprintf(w, "\x1b[%dA", drawn-len(lines))
		}
		drawn = len(lines)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// progressWidth keeps every line readable on an 80-column terminal.
const progressWidth = 79

// progressLines renders one line per resource:
//
//	apps/widgets       [#########...........]  45% 4.5k/10k  512/s ETA 11s Running
func progressLines(migs []api.MigrationStatus, width int) []string {
	if len(migs) == 0 {
		return []string{"no resources: start the agents with -schema FILE"}
	}
	out := make([]string, 0, len(migs))
	for _, m := range migs {
		out = append(out, progressLine(&m, width))
	}
	return out
}

func progressLine(m *api.MigrationStatus, width int) string {
	const barWidth = 20
	done, total := m.PassScanned, m.Total
	if m.State == migrate.StateSucceeded {
		done = total
	}
	frac := 0.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	fill := int(frac * barWidth)
	bar := "[" + strings.Repeat("#", fill) + strings.Repeat(".", barWidth-fill) + "]"
	name := m.Resource
	if len(name) > 18 {
		name = name[:17] + "~"
	}
	line := fmt.Sprintf("%-18s %s %3.0f%% %s/%s", name, bar, frac*100, human(min(done, total)), human(total))
	switch m.State {
	case migrate.StateRunning:
		line += " " + rateETA(m.ObjectsPerSecond, m.ETASeconds, m.Updated)
	case migrate.StateBlocked:
		line += fmt.Sprintf(" Blocked: %d poison", len(m.Poison))
	default:
		line += " " + string(m.State)
	}
	return fitLine(line, width)
}

func fitLine(s string, width int) string {
	if r := []rune(s); len(r) > width {
		return string(r[:width-1]) + "~"
	}
	return s
}

// human is a count in at most 5 characters: 999, 4.5k, 100k, 1.2M.
func human(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	case n < 1_000_000:
		return fmt.Sprintf("%dk", n/1000)
	case n < 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%dM", n/1_000_000)
}

// rateETA is "512/s ETA 11s": the rate the record measured over the last seconds and
// its ETA less the time since the record was written; "rate ?" until a rate is known.
func rateETA(rate, etaSeconds float64, updated time.Time) string {
	if rate <= 0 {
		return "rate ?"
	}
	return fmt.Sprintf("%s/s ETA %s", human(int64(rate)), eta(etaSeconds, rate, updated))
}

// eta is the time the record written at updated said is left, less the time since.
func eta(seconds, rate float64, updated time.Time) string {
	if rate <= 0 {
		return "?"
	}
	if !updated.IsZero() {
		seconds -= max(time.Since(updated).Seconds(), 0)
	}
	d := time.Duration(max(seconds, 0) * float64(time.Second)).Round(time.Second)
	if d >= time.Hour {
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return d.String()
}

// describeMigration is one line: state, target, progress.
func describeMigration(m *api.MigrationStatus) string {
	var b strings.Builder
	b.WriteString(string(m.State))
	if m.Target != "" {
		fmt.Fprintf(&b, " → %s", m.Target)
	}
	switch m.State {
	case migrate.StateRunning, migrate.StateAborted:
		fmt.Fprintf(&b, ": pass %d scanned %d of %d, %d rewritten, %d skipped (changed by clients), %s left",
			m.Pass, m.PassScanned, m.Total, m.Migrated, m.Skipped, objects(m.RemainingTotal()))
		if m.State == migrate.StateRunning && m.ObjectsPerSecond > 0 {
			fmt.Fprintf(&b, ", %.0f objects/s, about %s to go", m.ObjectsPerSecond, eta(m.ETASeconds, m.ObjectsPerSecond, m.Updated))
		}
	case migrate.StateSucceeded:
		fmt.Fprintf(&b, ": every stored object is in %s", m.Target)
		if m.Migrated > 0 || m.Skipped > 0 {
			fmt.Fprintf(&b, " (%d rewritten, %d skipped as changed by clients, finished %s)", m.Migrated, m.Skipped,
				m.Finished.Local().Format(time.DateTime))
		}
	case migrate.StateBlocked:
		fmt.Fprintf(&b, ": %s left that cannot be converted", objects(m.RemainingTotal()))
	case migrate.StateDryRun:
		fmt.Fprintf(&b, ": a migration would rewrite %s", objects(m.Migrated))
	}
	if m.Message != "" && m.State != migrate.StateSucceeded {
		fmt.Fprintf(&b, " (%s)", m.Message)
	}
	if m.Reason != "" && (m.State == migrate.StateRunning || m.State == migrate.StateAborted) {
		fmt.Fprintf(&b, "; started: %s", m.Reason)
	}
	return b.String()
}
