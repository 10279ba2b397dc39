package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/client"
)

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save the cluster's state to a file, or restore it from one"}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot reflecting every acknowledged write to FILE",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				body, err := c.Snapshot(ctx)
				if err != nil {
					return err
				}
				defer body.Close()
				// Write beside the target and rename, so FILE is either whole or untouched.
				tmp, err := os.CreateTemp(filepath.Dir(args[0]), ".keel-snapshot-*")
				if err != nil {
					return err
				}
				defer os.Remove(tmp.Name())
				n, err := io.Copy(tmp, body)
				if err == nil {
					err = tmp.Sync()
				}
				if cerr := tmp.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("snapshot save: %w", err)
				}
				if err := os.Rename(tmp.Name(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "saved %d bytes to %s\n", n, args[0])
				return nil
			})
		},
	})
	var forceForeign bool
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the whole cluster's state with a saved snapshot (disaster recovery)",
		Long: `Replace the whole cluster's state with a snapshot saved by 'keel snapshot save'.
Needs a management token (the snapshot right only saves). The file's MAC (only the
cluster that saved it can check it) and content are checked completely before anything
changes; the cluster keeps its own ID and secret. Only the leader restores: list every
node in -addr and the command finds it. A file this cluster cannot authenticate
(another cluster's, or saved by a release before the MAC) is refused unless
-force-foreign: use it only on a file you trust, e.g. to restore a lost cluster's
backup into a new one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				err = c.RestoreSnapshotWith(ctx, f, client.RestoreOptions{ForceForeign: forceForeign})
				switch {
				case err == nil:
					fmt.Fprintf(cmd.OutOrStdout(), "restored the cluster from %s\n", args[0])
					return nil
				case client.IsRetriable(err):
					return fmt.Errorf("snapshot restore: no node in -addr accepted it (is the leader listed?): %w", err)
				}
				return err // a bad file: no other node will take it either
			})
		},
	}
	restore.Flags().BoolVar(&forceForeign, "force-foreign", false, "restore a file this cluster cannot authenticate: another cluster's or a pre-MAC one (its data replaces this cluster's; the MAC is not checked)")
	cmd.AddCommand(restore)
	return cmd
}
