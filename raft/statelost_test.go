package raft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft/wal"
)

// Issue #34: a node that lost any part of its Raft state (the log, the stable store, a
// snapshot the log relies on) refuses to start and names keel rebuild, as one that lost
// all of it does. Each test takes the part away from a node's real data dir.

// openRefused opens cfg and expects ErrStateLost naming every want and keel rebuild.
// A node that starts is shut down at once: on some of these states it would go on to
// panic (an entry it must apply is in no snapshot and not in the log).
func openRefused(t *testing.T, cfg Config, want ...string) {
	t.Helper()
	n, err := Open(context.Background(), cfg, fsm.NewStore())
	if err == nil {
		n.shutdown()
		t.Fatalf("a node that lost part of its raft state started (%v missing)", want)
	}
	if !errors.Is(err, ErrStateLost) {
		t.Fatalf("open: %v, want ErrStateLost", err)
	}
	for _, s := range append(want, "keel rebuild") {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("open error does not say %q:\n%v", s, err)
		}
	}
	t.Logf("refused: %v", err)
}

// stoppedFollower runs a 3-node cluster, writes to it, and stops a follower; it returns
// the cluster and the follower's index.
func stoppedFollower(t *testing.T, tune func(*Config)) (*testCluster, int) {
	c := newCluster(t, 3, tune)
	lead := c.leader()
	for i := range 20 {
		mustPut(t, c.nodes[lead], fmt.Sprintf("k%d", i), "v")
	}
	victim := (lead + 1) % 3
	waitFor(t, 10*time.Second, "follower caught up", func() bool {
		return c.nodes[victim].Store().AppliedIndex() >= c.nodes[lead].Store().AppliedIndex()
	})
	c.nodes[victim].shutdown()
	c.nodes[victim] = nil
	return c, victim
}

// TestOpenRefusesLostWAL: a follower whose raft/wal is gone (raft.db, with its term and
// the mark that the log lives in the WAL, is still there) refuses to start. Before #34
// openLogStore took the missing wal/ for a data dir of a release before the WAL and
// moved raft.db's empty log into a new one: the node ran with an empty log.
func TestOpenRefusesLostWAL(t *testing.T) {
	c, victim := stoppedFollower(t, nil)
	raftDir := filepath.Join(c.cfgs[victim].DataDir, "raft")
	if err := os.RemoveAll(filepath.Join(raftDir, walDir)); err != nil {
		t.Fatal(err)
	}
	openRefused(t, c.cfgs[victim], filepath.Join(raftDir, walDir))
	if _, err := os.Stat(filepath.Join(raftDir, walDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused open created a WAL: %v", err)
	}
}

// TestOpenRefusesLostStableStore: a follower whose raft.db is gone (its term and vote:
// started, it could vote twice in one term) refuses to start, and leaves no new raft.db
// behind that a second start would take for the real one. Before #34 the WAL's entries
// made HasExistingState true and the node started at term 0.
func TestOpenRefusesLostStableStore(t *testing.T) {
	c, victim := stoppedFollower(t, nil)
	raftDir := filepath.Join(c.cfgs[victim].DataDir, "raft")
	if err := os.Remove(filepath.Join(raftDir, "raft.db")); err != nil {
		t.Fatal(err)
	}
	openRefused(t, c.cfgs[victim], filepath.Join(raftDir, "raft.db")+": term and vote) is missing")
	if _, err := os.Stat(filepath.Join(raftDir, "raft.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused open created a raft.db: %v", err)
	}
	openRefused(t, c.cfgs[victim], filepath.Join(raftDir, "raft.db")+": term and vote) is missing")

	// The WAL lost too: snapshots/ (here empty), created after raft.db, still tells.
	if err := os.RemoveAll(filepath.Join(raftDir, walDir)); err != nil {
		t.Fatal(err)
	}
	openRefused(t, c.cfgs[victim], filepath.Join(raftDir, "raft.db")+": term and vote) is missing")
}

// TestOpenRefusesStableStoreBehindLog: a raft.db that records a term older than the
// log's (an empty one put in place of the lost file, or an old copy) is no stable
// store of this log: the vote it held is lost.
func TestOpenRefusesStableStoreBehindLog(t *testing.T) {
	c, victim := stoppedFollower(t, nil)
	raftDir := filepath.Join(c.cfgs[victim].DataDir, "raft")
	if err := os.Remove(filepath.Join(raftDir, "raft.db")); err != nil {
		t.Fatal(err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	bolt.Close()
	openRefused(t, c.cfgs[victim], "raft.db", "term")
}

// singleNodeSnapshotted runs one node that compacts its log after a snapshot (the log
// then starts past index 1), stops it, and returns its config.
func singleNodeSnapshotted(t *testing.T) Config {
	cfg := testConfig(t, "n1")
	cfg.Bootstrap = true
	cfg.TrailingLogs = 2
	n, err := Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "leader", func() bool { return n.IsLeader() })
	for i := range 20 {
		mustPut(t, n, fmt.Sprintf("k%d", i), "v")
	}
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if first, _ := n.wal.FirstIndex(); first <= 1 {
		t.Fatalf("the snapshot did not compact the log (first index %d)", first)
	}
	cfg.BindAddr, cfg.Bootstrap = n.Addr(), false
	if err := n.shutdown(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestOpenRefusesLostSnapshot: the log starts after index N and no snapshot at or past
// N is left. Before #34 the node started with an empty state machine and a log it could
// not apply from the start.
func TestOpenRefusesLostSnapshot(t *testing.T) {
	cfg := singleNodeSnapshotted(t)
	snaps := filepath.Join(cfg.DataDir, "raft", "snapshots")
	if err := os.RemoveAll(snaps); err != nil {
		t.Fatal(err)
	}
	openRefused(t, cfg, "snapshot")

	// The snapshot's directory is listed but its state is gone: the same.
	cfg = singleNodeSnapshotted(t)
	snaps = filepath.Join(cfg.DataDir, "raft", "snapshots")
	states, _ := filepath.Glob(filepath.Join(snaps, "*", "state.bin"))
	if len(states) == 0 {
		t.Fatal("no snapshot state file")
	}
	for _, s := range states {
		os.Remove(s)
	}
	openRefused(t, cfg, "snapshot")
}

// TestOpenRefusesRecordedSnapshotGone: raft.db records that a snapshot at index N was
// taken, the snapshot files are gone, and the log does not reach N (here: it is
// empty, as after a snapshot install that no entry followed yet).
func TestOpenRefusesRecordedSnapshotGone(t *testing.T) {
	cfg := singleNodeSnapshotted(t)
	raftDir := filepath.Join(cfg.DataDir, "raft")
	if err := os.RemoveAll(filepath.Join(raftDir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(raftDir, walDir)); err != nil {
		t.Fatal(err)
	}
	w, err := wal.Open(filepath.Join(raftDir, walDir))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	openRefused(t, cfg, "snapshot")
}

// preWALDataDir turns a stopped node's data dir into the layout of a release before
// the WAL: the log back in raft.db, no wal/, no mark that the log lives in the WAL
// (a zero: raft.db has no delete; the mark is one).
// It returns the log's bounds.
func preWALDataDir(t *testing.T, dataDir string) (first, last uint64) {
	t.Helper()
	raftDir := filepath.Join(dataDir, "raft")
	w, err := wal.Open(filepath.Join(raftDir, walDir))
	if err != nil {
		t.Fatal(err)
	}
	first, _ = w.FirstIndex()
	last, _ = w.LastIndex()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i <= last; i++ {
		var l hraft.Log
		if err := w.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if err := bolt.StoreLog(&l); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if err := bolt.SetUint64(keyLogInWAL, 0); err != nil {
		t.Fatal(err)
	}
	bolt.Close()
	if err := os.RemoveAll(filepath.Join(raftDir, walDir)); err != nil {
		t.Fatal(err)
	}
	return first, last
}

// TestPreWALDataDirStarts: a data dir of a release before the WAL (the log in raft.db,
// no wal/) is no loss: the node moves the log into a new WAL and starts on it, with
// its state. The same dir with raft.db marked as having moved its log is a lost WAL.
func TestPreWALDataDirStarts(t *testing.T) {
	c, victim := stoppedFollower(t, nil)
	cfg := c.cfgs[victim]
	first, last := preWALDataDir(t, cfg.DataDir)
	n, err := Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatalf("a pre-WAL data dir did not start: %v", err)
	}
	c.nodes[victim] = n
	if f, _ := n.wal.FirstIndex(); f != first {
		t.Errorf("the WAL starts at %d, want %d", f, first)
	}
	if l, _ := n.wal.LastIndex(); l < last {
		t.Errorf("the WAL ends at %d, want at least %d", l, last)
	}
	lead := c.leader()
	mustPut(t, c.nodes[lead], "after", "x")
	waitFor(t, 10*time.Second, "the migrated node applies", func() bool {
		return n.Store().AppliedIndex() >= c.nodes[lead].Store().AppliedIndex()
	})
	if v, err := n.bolt.GetUint64(keyLogInWAL); err != nil || v != 1 {
		t.Errorf("raft.db not marked after the move: %d, %v", v, err)
	}
	n.shutdown()
	c.nodes[victim] = nil
	// Now the WAL is lost: raft.db's mark tells it from the pre-WAL layout, even with
	// the old log left behind in raft.db (a move whose cleanup failed).
	raftDir := filepath.Join(cfg.DataDir, "raft")
	w, err := wal.Open(filepath.Join(raftDir, walDir))
	if err != nil {
		t.Fatal(err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	var l hraft.Log
	if err := w.GetLog(first, &l); err != nil {
		t.Fatal(err)
	}
	bolt.StoreLog(&l)
	w.Close()
	bolt.Close()
	os.RemoveAll(filepath.Join(raftDir, walDir))
	openRefused(t, cfg, filepath.Join(raftDir, walDir))
}

// TestPreviousReleaseDataDirMarked: a data dir of the release before #34 has wal/ and
// no mark in raft.db: it starts, and the mark is written. Had it lost its WAL before
// that start, its term (and no log in raft.db) gives the loss away.
func TestPreviousReleaseDataDirMarked(t *testing.T) {
	c, victim := stoppedFollower(t, nil)
	cfg := c.cfgs[victim]
	raftDir := filepath.Join(cfg.DataDir, "raft")
	unmark := func() {
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, "raft.db")})
		if err != nil {
			t.Fatal(err)
		}
		defer bolt.Close()
		if err := bolt.SetUint64(keyLogInWAL, 0); err != nil {
			t.Fatal(err)
		}
		if err := bolt.SetUint64(keySnapshotIndex, 0); err != nil {
			t.Fatal(err)
		}
	}
	unmark()
	n, err := Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatalf("a data dir of the previous release did not start: %v", err)
	}
	if v, err := n.bolt.GetUint64(keyLogInWAL); err != nil || v != 1 {
		t.Errorf("raft.db not marked: %d, %v", v, err)
	}
	n.shutdown()
	unmark()
	os.RemoveAll(filepath.Join(raftDir, walDir))
	openRefused(t, cfg, filepath.Join(raftDir, walDir))
}
