package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/fsm/etcdsnap"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/versions"
)

// localHold is what a keel cluster with default limits can hold (kv's rules: keys
// non-empty UTF-8 of at most MaxKeyBytes, values of at most MaxValueBytes, nothing
// under keel's own prefix). The cluster checks again with its own configuration and
// schema (resource prefixes) before it restores anything.
func localHold(key, value []byte) error {
	cfg := kv.DefaultConfig()
	switch {
	case len(key) == 0:
		return errors.New("empty key")
	case len(key) > cfg.MaxKeyBytes:
		return fmt.Errorf("key is %d bytes, more than keel's maximum %d", len(key), cfg.MaxKeyBytes)
	case !utf8.Valid(key):
		return errors.New("key is not valid UTF-8")
	case int64(len(value)) > cfg.MaxValueBytes:
		return fmt.Errorf("a value is %d bytes, more than keel's default maximum %d", len(value), cfg.MaxValueBytes)
	case bytes.HasPrefix(key, []byte(versions.SystemPrefix)):
		return fmt.Errorf("key is under keel's reserved prefix %q", versions.SystemPrefix)
	}
	return nil
}

// isSystemKey: keel's own records (ACL, storage versions) stay in keel.
func isSystemKey(key []byte) bool { return bytes.HasPrefix(key, []byte(versions.SystemPrefix)) }

// restoreEtcd imports the etcd snapshot at path into the cluster: it reads and checks
// the whole file here, lists what keel cannot hold (and stops, unless skip), converts
// it to a keel stream and sends it; the cluster checks it against its own rules.
func restoreEtcd(cmd *cobra.Command, ctx context.Context, c *client.Client, path string, skip, yes bool) error {
	start := time.Now()
	d, err := etcdsnap.Read(path)
	if err != nil {
		return fmt.Errorf("snapshot restore: %w; nothing changed", err)
	}
	bad := d.Unholdable(localHold)
	for _, u := range bad {
		fmt.Fprintln(cmd.ErrOrStderr(), "cannot hold:", u)
	}
	if len(bad) > 0 && !skip {
		return fmt.Errorf("snapshot restore: %s holds %d keys or leases keel cannot hold (listed above); nothing changed "+
			"(--skip-unholdable leaves them out)", path, len(bad))
	}
	if err := confirmRestore(cmd.InOrStdin(), cmd.ErrOrStderr(), stdinIsTerminal(cmd), yes, path); err != nil {
		return err
	}
	tmp, err := os.CreateTemp("", "keel-etcd-import-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := d.WriteKeel(tmp, etcdsnap.ImportOptions{Hold: localHold, Skip: bad}); err != nil {
		return fmt.Errorf("snapshot restore: %w", err)
	}
	res, err := c.ImportEtcdSnapshot(ctx, tmp, skip)
	if err != nil {
		if client.IsRetriable(err) {
			return fmt.Errorf("snapshot restore: no node in -addr accepted it (is the leader listed?): %w", err)
		}
		return err
	}
	if structured() {
		return printValue(cmd.OutOrStdout(), res.Import)
	}
	s := res.Import
	fmt.Fprintf(cmd.OutOrStdout(), "imported etcd snapshot %s in %v: %d keys (%d versions), %d leases, revision %d, compact revision %d; "+
		"left out %d keys, %d leases; kept %d of the cluster's own records\n", path, time.Since(start).Round(time.Millisecond),
		s.Keys, s.Versions, s.Leases, s.Revision, s.CompactRevision, s.SkippedKeys, s.SkippedLeases, s.KeptRecords)
	return nil
}

// saveEtcd writes the cluster's state as an etcd snapshot at path.
func saveEtcd(cmd *cobra.Command, ctx context.Context, c *client.Client, path string) error {
	body, err := c.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keel-snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	n, err := io.Copy(tmp, body)
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	sf, err := agent.OpenSavedFile(tmp, n)
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	st := fsm.NewStore()
	if err := st.Restore(sf.Stream); err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	sum, err := etcdsnap.Write(path, st.View(), isSystemKey)
	if err != nil {
		return fmt.Errorf("snapshot save: %w", err)
	}
	if sum.Behind > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: etcd will start at revision %d, %d behind keel's %d (keel's last writes were compacted away)\n",
			sum.Revision, sum.Behind, st.Revision())
	}
	if structured() {
		return printValue(cmd.OutOrStdout(), sum)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "saved an etcd snapshot (%d bytes) to %s: %d keys, %d records since the compaction, %d leases, "+
		"revision %d, compact revision %d\n", sum.Size, path, sum.Keys, sum.Records, sum.Leases, sum.Revision, sum.Compact)
	return nil
}

// snapshotInfo is what `keel snapshot inspect` prints.
type snapshotInfo struct {
	File            string `json:"file"`
	Format          string `json:"format"` // "etcd" or "keel"
	Revision        int64  `json:"revision"`
	CompactRevision int64  `json:"compact_revision"`
	Keys            int    `json:"keys"`
	Leases          int    `json:"leases"`
	Size            int64  `json:"size"`
	SHA256          string `json:"sha256"` // of the whole file
	// etcd: etcdutl snapshot status's hash (crc32c of the buckets) and storage version.
	EtcdHash       string `json:"etcd_hash,omitempty"`
	DBSize         int64  `json:"db_size,omitempty"` // etcdutl's total size: the database's pages
	StorageVersion string `json:"storage_version,omitempty"`
	Records        int    `json:"records,omitempty"`
	// keel:
	ClusterID string `json:"cluster_id,omitempty"`
	// Checks lists what was checked (every checksum the file carries that can be
	// checked offline) and what could not be.
	Checks []string `json:"checks"`
	// Unholdable (etcd) lists what a keel cluster with default limits cannot hold.
	Unholdable []string `json:"unholdable,omitempty"`
}

func newSnapshotInspectCmd() *cobra.Command {
	var verify bool
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Describe a snapshot file offline (keel's or etcd's) and check it",
		Long: `Describe a snapshot file without a cluster: keel's (keel snapshot save, or etcdctl
snapshot save from keel's etcd door) or etcd's (etcdctl snapshot save, or a stopped
member's member/snap/db). Prints revision, compact revision, keys, leases, size and
sha256; for etcd's files also etcdutl snapshot status's hash and what keel could not
hold. The whole file is always read and every checksum it carries that can be
checked offline is checked (etcd: etcdctl's sha256, bbolt's length, every record;
keel: the envelope's sha256, the stream's CRC and structure; a keel MAC needs the
cluster's secret and is not checked). A damaged file is reported and the command
exits non-zero. --verify prints each check.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := inspectSnapshot(args[0])
			if err != nil {
				return fmt.Errorf("snapshot inspect: %s is damaged or not a snapshot: %w", args[0], err)
			}
			if structured() {
				return printValue(cmd.OutOrStdout(), info)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "file:             %s\nformat:           %s\nrevision:         %d\ncompact revision: %d\nkeys:             %d\nleases:           %d\nsize:             %d\nsha256:           %s\n",
				info.File, info.Format, info.Revision, info.CompactRevision, info.Keys, info.Leases, info.Size, info.SHA256)
			if info.EtcdHash != "" {
				fmt.Fprintf(w, "etcd hash:        %s\ndb size:          %d\nrecords:          %d\nstorage version:  %s\n", info.EtcdHash, info.DBSize, info.Records, info.StorageVersion)
			}
			if info.ClusterID != "" {
				fmt.Fprintf(w, "cluster id:       %s\n", info.ClusterID)
			}
			if verify {
				for _, c := range info.Checks {
					fmt.Fprintln(w, "check:           ", c)
				}
			}
			for _, u := range info.Unholdable {
				fmt.Fprintln(w, "cannot hold:     ", u)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&verify, "verify", false, "print every check made and its result")
	return cmd
}

func inspectSnapshot(path string) (snapshotInfo, error) {
	info := snapshotInfo{File: path}
	f, err := os.Open(path)
	if err != nil {
		return info, err
	}
	defer f.Close()
	h := sha256.New()
	if info.Size, err = io.Copy(h, f); err != nil {
		return info, err
	}
	info.SHA256 = hex.EncodeToString(h.Sum(nil))
	if etcdsnap.Sniff(f) {
		return inspectEtcd(path, info)
	}
	info.Format = "keel"
	sf, err := agent.OpenSavedFile(f, info.Size)
	if err != nil {
		return info, err
	}
	if sf.Envelope {
		info.Checks = append(info.Checks, "etcd envelope sha256: ok")
	}
	st := fsm.NewStore()
	if err := st.Restore(sf.Stream); err != nil {
		return info, err
	}
	info.Checks = append(info.Checks, "state machine stream: CRC-32C and structure ok")
	if sf.MAC {
		info.Checks = append(info.Checks, "MAC: not checked (only the cluster that saved the file holds its key)")
	} else {
		info.Checks = append(info.Checks, "MAC: none (a bare stream, or saved before files carried one)")
	}
	v := st.View()
	info.Revision, info.CompactRevision, info.Keys, info.Leases = v.Revision(), v.CompactRevision(), v.Len(), v.LeaseCount()
	info.ClusterID, _, _ = st.ClusterMeta()
	return info, nil
}

func inspectEtcd(path string, info snapshotInfo) (snapshotInfo, error) {
	info.Format = "etcd"
	st, err := etcdsnap.ReadStatus(path)
	if err != nil {
		return info, err
	}
	d, err := etcdsnap.Read(path)
	if err != nil {
		return info, err
	}
	info.Revision, info.CompactRevision, info.Keys, info.Leases = st.Revision, st.CompactRevision, st.TotalKey, st.Leases
	info.EtcdHash, info.StorageVersion, info.Records, info.DBSize = fmt.Sprintf("%x", st.Hash), st.Version, st.Records, st.TotalSize
	if st.Checksummed {
		info.Checks = append(info.Checks, "etcdctl sha256: ok")
	} else {
		info.Checks = append(info.Checks, "etcdctl sha256: none (a member's db file): a changed byte inside a value would go unseen")
	}
	info.Checks = append(info.Checks, "bbolt length and pages reached: ok", fmt.Sprintf("records decoded: %d versions, %d leases, meta", st.Records, st.Leases))
	for _, u := range d.Unholdable(localHold) {
		info.Unholdable = append(info.Unholdable, u.String())
	}
	return info, nil
}
