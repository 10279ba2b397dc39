package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/keel-kv/keel/fsm/etcdsnap"
	"github.com/keel-kv/keel/kv/client"
)

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save the cluster's state to a file, or restore it from one"}
	cmd.AddCommand(newSnapshotSaveCmd(), newSnapshotRestoreCmd(), newSnapshotInspectCmd())
	return cmd
}

func newSnapshotSaveCmd() *cobra.Command {
	var format string
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot reflecting every acknowledged write to FILE",
		Long: `Write a snapshot reflecting every acknowledged write to FILE. --format keel (the
default) writes keel's own file, which 'keel snapshot restore' takes back. --format etcd
writes an etcd snapshot (a bbolt database and its sha256, as 'etcdctl snapshot save'
writes one) that 'etcdutl snapshot restore' accepts: the same keys, revisions since the
compaction, versions, leases (etcd restarts their TTL) and compact revision; keel's own
records (ACL, storage versions) and encoding tags stay behind.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case "keel":
			case "etcd":
				return withClient(cmd, func(ctx context.Context, c *client.Client) error { return saveEtcd(cmd, ctx, c, args[0]) })
			default:
				return fmt.Errorf("--format %q: want keel or etcd", format)
			}
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
				bar := newBytesBar(os.Stderr, -1, "saving "+args[0])
				n, err := io.Copy(io.MultiWriter(tmp, bar), body)
				bar.done()
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
	}
	save.Flags().StringVar(&format, "format", "keel", "file format: keel, or etcd (a file etcdutl snapshot restore takes)")
	return save
}

func newSnapshotRestoreCmd() *cobra.Command {
	var forceForeign, yes, skipUnholdable bool
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
backup into a new one.

Every key, lease and ACL of the cluster is replaced, so the command asks first when
standard input is a terminal; --yes (-y) answers for it, and without a terminal it
is required.

An etcd snapshot (etcdctl snapshot save, or a stopped member's member/snap/db) is
recognised and imported with its history since etcd's compaction: every revision,
each key's create/mod revision and version, leases (ID and TTL; the time left
restarts), the revision and compact revision. The file is read and checked here
first; what keel cannot hold (keys not UTF-8 or too long, values too large, keys
under keel's reserved prefix or a resource's prefix, leases over a day) is listed
and nothing changes, unless --skip-unholdable, which leaves exactly those out. The
cluster keeps its own ACL and records.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				if etcdsnap.Sniff(f) {
					return restoreEtcd(cmd, ctx, c, args[0], skipUnholdable, yes)
				}
				if err := confirmRestore(cmd.InOrStdin(), cmd.ErrOrStderr(), stdinIsTerminal(cmd), yes, args[0]); err != nil {
					return err
				}
				var size int64 = -1
				if fi, err := f.Stat(); err == nil {
					size = fi.Size()
				}
				bar := newBytesBar(os.Stderr, size, "restoring "+args[0])
				err = c.RestoreSnapshotWith(ctx, &barReader{f: f, bar: bar}, client.RestoreOptions{ForceForeign: forceForeign})
				bar.done()
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
	restore.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask before replacing the cluster's state (required without a terminal)")
	restore.Flags().BoolVar(&forceForeign, "force-foreign", false, "restore a file this cluster cannot authenticate: another cluster's or a pre-MAC one (its data replaces this cluster's; the MAC is not checked)")
	restore.Flags().BoolVar(&skipUnholdable, "skip-unholdable", false, "etcd snapshots: leave out the keys and leases keel cannot hold (they are listed) instead of refusing the import")
	return restore
}

// errRestoreUnconfirmed refuses a restore nobody confirmed.
var errRestoreUnconfirmed = errors.New("snapshot restore replaces every key, lease and ACL of the cluster: " +
	"give --yes to confirm (there is no terminal to ask on)")

// confirmRestore asks on a terminal before a restore replaces the cluster's state
// (etcdctl and Consul warn too); yes skips the question, and without a terminal yes
// is required.
func confirmRestore(in io.Reader, out io.Writer, terminal, yes bool, file string) error {
	if yes {
		return nil
	}
	if !terminal {
		return errRestoreUnconfirmed
	}
	fmt.Fprintf(out, "Replace the whole cluster's state (every key, lease and ACL) with %s? [y/N] ", file)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return errors.New("snapshot restore: not confirmed; nothing changed")
}

// stdinIsTerminal reports whether the command's standard input is a terminal.
func stdinIsTerminal(cmd *cobra.Command) bool {
	f, ok := cmd.InOrStdin().(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// bytesBar is a progress bar of bytes on a terminal, and nothing elsewhere (a pipe or
// a log file gets no control characters).
type bytesBar struct{ bar *progressbar.ProgressBar }

func newBytesBar(w *os.File, size int64, what string) *bytesBar {
	if !term.IsTerminal(int(w.Fd())) {
		return &bytesBar{}
	}
	return &bytesBar{bar: progressbar.NewOptions64(size, progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what), progressbar.OptionShowBytes(true), progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())}
}

func (b *bytesBar) Write(p []byte) (int, error) {
	if b.bar != nil {
		b.bar.Write(p)
	}
	return len(p), nil
}

func (b *bytesBar) done() {
	if b.bar != nil {
		b.bar.Finish()
	}
}

// barReader reads a snapshot file for a restore, moving its bar (a seek, when the
// restore moves on to another node, moves it back).
type barReader struct {
	f   *os.File
	bar *bytesBar
}

func (r *barReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	r.bar.Write(p[:n])
	return n, err
}

func (r *barReader) Seek(off int64, whence int) (int64, error) {
	pos, err := r.f.Seek(off, whence)
	if err == nil && r.bar.bar != nil {
		r.bar.bar.Set64(pos)
	}
	return pos, err
}
