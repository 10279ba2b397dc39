package agent

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestDataDirIsPrivate: everything a node writes is readable by its user only —
// directories 0700, files 0600 — including a data dir that existed with wider
// permissions, Raft snapshots and the WAL.
func TestDataDirIsPrivate(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, "n1")
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Raft.Bootstrap = true
	cfg.Raft.SnapshotThreshold = 16
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, agents: []*Agent{a}, cfgs: []Config{cfg}}
	c.waitReady(0)
	cl := c.client(0)
	for i := range 40 {
		if _, err := cl.Put(context.Background(), fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Node().Snapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	a.Close(context.Background())
	n := 0
	filepath.WalkDir(cfg.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, _ := d.Info()
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if n < 5 {
		t.Errorf("only %d entries in the data dir", n)
	}
}
