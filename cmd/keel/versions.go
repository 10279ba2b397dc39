package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/versions"
)

func newVersionsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "versions",
		Short: "Show, per resource, every node's storage versions, the common version and what is stored",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				rep, err := fetchReport(ctx, c)
				if err != nil {
					return err
				}
				// A node of a release without the migrator has no /v1/migrations: no line.
				migs, _ := c.Migrations(ctx)
				if structured() {
					return printValue(cmd.OutOrStdout(), struct {
						versions.Report
						Migrations []migrate.Status `json:"migrations"`
					}{*rep, migs})
				}
				return printVersions(cmd.OutOrStdout(), rep, migs, time.Now())
			})
		},
	}
}

// fetchReport asks the cluster for its storage-version report.
func fetchReport(ctx context.Context, c *client.Client) (*versions.Report, error) {
	raw, err := c.Versions(ctx)
	if err != nil {
		return nil, err
	}
	var rep versions.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return nil, fmt.Errorf("versions: decode the report: %w", err)
	}
	return &rep, nil
}

// printVersions renders a report: a table of node entries per resource, then the
// agreement and the stored encodings with object counts.
func printVersions(w io.Writer, rep *versions.Report, migs []migrate.Status, now time.Time) error {
	if len(rep.Resources) == 0 {
		fmt.Fprintln(w, "no resources: start the agents with -schema FILE")
		return nil
	}
	for i, rr := range rep.Resources {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n", rr.Resource)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tENCODING\tWRITES\tDECODES\tSERVES")
		for _, e := range rr.StorageVersion.StorageVersions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", e.NodeID, e.EncodingVersion, dash(e.EffectiveEncodingVersion),
				strings.Join(e.DecodableVersions, ","), strings.Join(e.ServedVersions, ","))
		}
		tw.Flush()
		sv := rr.StorageVersion
		common := sv.CommonEncodingVersion
		if common == "" {
			common = "(unset)"
		}
		fmt.Fprintf(w, "  common encoding version: %s", common)
		if c, ok := sv.Condition(versions.ConditionAllEncodingVersionsEqual); ok {
			fmt.Fprintf(w, "  [%s=%s %s since %s]", c.Type, c.Status, c.Reason, c.LastTransitionTime.Format(time.RFC3339))
		}
		fmt.Fprintln(w)
		if ss := rr.StorageState; ss != nil {
			var parts []string
			for _, v := range ss.PersistedEncodingVersions {
				parts = append(parts, fmt.Sprintf("%s (%s)", v, objects(ss.ObjectCounts[v])))
			}
			fmt.Fprintf(w, "  stored in: %s", strings.Join(parts, ", "))
			switch {
			case ss.Exact:
				fmt.Fprintf(w, "  [exact at revision %d]", ss.ObservedRevision)
			case !ss.LastHeartbeat.IsZero():
				fmt.Fprintf(w, "  [revision %d, heartbeat %s ago]", ss.ObservedRevision, now.Sub(ss.LastHeartbeat).Round(time.Second))
			}
			fmt.Fprintln(w)
		}
		switch {
		case rr.WritesBlocked != "":
			fmt.Fprintf(w, "  node %s refuses writes: %s\n", rep.NodeID, rr.WritesBlocked)
		case rr.WriteEncoding != "":
			fmt.Fprintf(w, "  node %s writes %s\n", rep.NodeID, rr.WriteEncoding)
		}
		if rr.HeldBack != "" {
			fmt.Fprintf(w, "  held back: %s\n", rr.HeldBack)
		}
		for _, m := range migs {
			if m.Resource == rr.Resource {
				fmt.Fprintf(w, "  migration: %s\n", describeMigration(&m))
			}
		}
	}
	return nil
}

func newUpgradeCmd() *cobra.Command {
	up := &cobra.Command{Use: "upgrade", Short: "Check upgrade safety"}
	var schemaFile string
	check := &cobra.Command{
		Use:   "check -schema FILE",
		Short: "Say whether a node with the schema FILE (newer or older release) can join the cluster now",
		Long: `Say whether a node running the schema FILE can join the cluster now: it must decode every
version stored objects use, and share a decodable version with every registered node.

For an upgrade, FILE is the new release's schema. For a downgrade, it is the older
release's: the answer says whether that release can read everything stored now, and
otherwise names each resource, version and object count it could not read (migrate
them to a version it decodes first). Stored versions are counted exactly at the
current revision by the answering node (objects without an encoding tag included);
only a node of an older release answers from the StorageState heartbeat.
Exits with status 1 when it is not safe.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := versions.LoadSchema(schemaFile)
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				rep, err := fetchReport(ctx, c)
				if err != nil {
					return err
				}
				findings := versions.CheckUpgrade(s, rep)
				if structured() {
					if err := printValue(cmd.OutOrStdout(), findings); err != nil {
						return err
					}
				} else {
					printFindings(cmd.OutOrStdout(), schemaFile, findings)
				}
				for _, f := range findings {
					if !f.OK {
						cmd.SilenceUsage = true
						return errUnsafeUpgrade
					}
				}
				return nil
			})
		},
	}
	check.Flags().StringVar(&schemaFile, "schema", "", "schema file of the release to check (required)")
	check.MarkFlagRequired("schema")
	up.AddCommand(check)
	return up
}

var errUnsafeUpgrade = errors.New("upgrade check: a node with this schema cannot join now")

func printFindings(w io.Writer, file string, findings []versions.Finding) {
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Resource < findings[j].Resource })
	ok := true
	for _, f := range findings {
		mark := "ok  "
		if !f.OK {
			mark, ok = "FAIL", false
		}
		fmt.Fprintf(w, "%s  %s: %s\n", mark, f.Resource, f.Message)
	}
	if ok {
		fmt.Fprintf(w, "a node with %s can join now\n", file)
	} else {
		fmt.Fprintf(w, "a node with %s cannot join now\n", file)
	}
}

func objects(n int64) string {
	if n == 1 {
		return "1 object"
	}
	return fmt.Sprintf("%d objects", n)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print keel's release and the log formats it applies",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if structured() {
				return printValue(cmd.OutOrStdout(), versionInfo{Release: buildinfo.Version(),
					MinCommandFormat: int(fsm.MinCommandFormat), MaxCommandFormat: int(fsm.MaxCommandFormat), Go: runtime.Version()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "keel %s (command formats %d..%d, %s)\n", buildinfo.Version(),
				fsm.MinCommandFormat, fsm.MaxCommandFormat, runtime.Version())
			return nil
		},
	}
}

// versionInfo is `keel version -o json`.
type versionInfo struct {
	Release          string `json:"release"`
	MinCommandFormat int    `json:"min_command_format"`
	MaxCommandFormat int    `json:"max_command_format"`
	Go               string `json:"go"`
}
