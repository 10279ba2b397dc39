package raft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft/wal"
)

// TestLogMovesFromBolt: a data directory of a release that kept the log in raft.db
// gets it copied into the WAL on first start (a leftover partial copy is redone), and
// raft.db keeps only the stable store.
func TestLogMovesFromBolt(t *testing.T) {
	dir := t.TempDir()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	var logs []*hraft.Log
	for i := uint64(7); i <= 3000; i++ {
		logs = append(logs, &hraft.Log{Index: i, Term: 2, Type: hraft.LogCommand, Data: []byte(fmt.Sprint(i))})
	}
	if err := bolt.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	bolt.SetUint64([]byte("CurrentTerm"), 2)
	// A crash during an earlier copy left a partial WAL under the temporary name.
	os.MkdirAll(filepath.Join(dir, walDir+".tmp"), 0o700)
	os.WriteFile(filepath.Join(dir, walDir+".tmp", "seg-00000000000000000007.wal"), []byte("partial"), 0o600)

	w, err := openLogStore(dir, bolt, wal.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, _ := w.FirstIndex()
	last, _ := w.LastIndex()
	if first != 7 || last != 3000 {
		t.Fatalf("wal holds [%d, %d], want [7, 3000]", first, last)
	}
	for _, i := range []uint64{7, 1024, 3000} {
		var l hraft.Log
		if err := w.GetLog(i, &l); err != nil || !bytes.Equal(l.Data, []byte(fmt.Sprint(i))) || l.Term != 2 {
			t.Fatalf("entry %d = %+v, %v", i, l, err)
		}
	}
	if n, _ := bolt.LastIndex(); n != 0 {
		t.Errorf("raft.db still holds log entries up to %d", n)
	}
	if term, _ := bolt.GetUint64([]byte("CurrentTerm")); term != 2 {
		t.Errorf("stable store lost the term: %d", term)
	}
	if _, err := os.Stat(filepath.Join(dir, walDir+".tmp")); !os.IsNotExist(err) {
		t.Errorf("temporary copy left behind: %v", err)
	}
}

// failingLogStore wraps a node's real log store; while fail is set, StoreLogs fails
// as it does on a full disk.
type failingLogStore struct {
	hraft.LogStore
	fail *atomic.Bool
}

func (f failingLogStore) StoreLogs(logs []*hraft.Log) error {
	if f.fail.Load() {
		return errors.New("no space left on device (injected)")
	}
	return f.LogStore.StoreLogs(logs)
}

func (f failingLogStore) StoreLog(l *hraft.Log) error { return f.StoreLogs([]*hraft.Log{l}) }

// TestFollowerRecoversAfterFailedAppends: a follower whose log store rejects appends
// for a while (a full disk) catches up once it accepts them again. With pipelined
// replication the leader would stop sending it entries for good while still sending
// heartbeats (hashicorp/raft#612).
func TestFollowerRecoversAfterFailedAppends(t *testing.T) {
	var fail atomic.Bool
	c := newCluster(t, 3, nil)
	lead := c.leader()
	victim := (lead + 1) % 3
	// Reopen the victim with the failing wrapper around its real log.
	c.nodes[victim].shutdown()
	cfg := c.cfgs[victim]
	cfg.wrapLogStore = func(s hraft.LogStore) hraft.LogStore { return failingLogStore{LogStore: s, fail: &fail} }
	c.cfgs[victim] = cfg
	c.restart(victim)
	lead = c.leader()
	mustPut(t, c.nodes[lead], "before", "x")
	waitFor(t, 10*time.Second, "victim caught up", func() bool {
		return c.nodes[victim].Store().AppliedIndex() >= c.nodes[lead].Store().AppliedIndex()
	})
	// Concurrent writers keep the leader's replication trigger busy while the
	// follower rejects appends, which is when the pipeline used to wedge.
	fail.Store(true)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				if _, err := applyThroughElections(t, c.nodes[lead], putCmd(fmt.Sprintf("during-%d-%d", w, i), "x")); err != nil {
					t.Errorf("put during failure: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	fail.Store(false)
	for i := range 50 {
		mustPut(t, c.nodes[lead], fmt.Sprintf("after-%d", i), "x")
	}
	// Leadership may have moved meanwhile on a loaded machine: every node, the victim
	// included, must come to hold one state at one applied index.
	var states string
	waitFor(t, 15*time.Second, "the follower that failed appends to catch up", func() bool {
		v := c.nodes[victim].Store().View()
		same := true
		states = ""
		for _, n := range c.nodes {
			o := n.Store().View()
			states += fmt.Sprintf(" %s@%d=%x", n.cfg.NodeID, o.AppliedIndex(), o.Hash())
			same = same && o.AppliedIndex() == v.AppliedIndex() && o.Hash() == v.Hash()
		}
		return same
	})
	t.Logf("states:%s", states)
}

// TestLeaderLogFailureNeverAppliesWhatFailed: the leader's log fails through the WAL's
// fault seam — a write that fails part-way (EIO), or an fdatasync that fails after
// the data reached the page cache — while clients write through it. Whatever a client
// was told: an acknowledged write is on every node, a write told "not applied"
// (ErrNotLeader, ErrNoLeader) is on none, even after the failed leader restarts from
// what its disk holds, and no write is applied twice (each key's version stays 1).
// A failed fdatasync fails the store for good: the leader steps down and stops
// (LogFailed) and its writes in flight end with ErrTimeout, never "not applied"
// (issue 22).
func TestLeaderLogFailureNeverAppliesWhatFailed(t *testing.T) {
	for _, fault := range []string{"write", "sync"} {
		t.Run(fault, func(t *testing.T) { testLeaderLogFailure(t, fault) })
	}
}

func testLeaderLogFailure(t *testing.T, fault string) {
	controls := map[string]string{}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.LogFaults = filepath.Join(t.TempDir(), "faults")
		controls[cfg.NodeID] = cfg.LogFaults
	})
	lead := c.leader()
	victim := c.nodes[lead]
	acked, failed, unknown := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := range 10 {
		k := fmt.Sprintf("before-%d", i)
		mustPut(t, victim, k, k)
		acked[k] = true
	}
	if err := os.WriteFile(controls[victim.cfg.NodeID], []byte(fault), 0o600); err != nil {
		t.Fatal(err)
	}
	if fault == "sync" {
		// The first write meets the failing fdatasync on the leader itself: its answer
		// must be "unknown", before any retry could apply it elsewhere.
		d, err := fsm.EncodeCommand(putCmd("first", "x"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := victim.applyLocal(d); !errors.Is(err, ErrTimeout) || errors.Is(err, ErrNotLeader) {
			t.Fatalf("a write on the failing leader answered %v, want ErrTimeout (outcome unknown)", err)
		}
		unknown["first"] = true
	}
	for i := range 8 {
		k := fmt.Sprintf("during-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := victim.Apply(ctx, putCmd(k, k))
		cancel()
		switch {
		case err == nil && res.Err == nil:
			acked[k] = true
		case errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader):
			failed[k] = true
		default:
			unknown[k] = true
		}
	}
	if fault == "sync" {
		select {
		case err := <-victim.LogFailed():
			if !errors.Is(err, wal.ErrFailed) && !strings.Contains(err.Error(), "injected") {
				t.Fatalf("LogFailed = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the leader's fdatasync failed but LogFailed did not fire")
		}
		if len(unknown) == 0 {
			t.Fatalf("no write through the failing leader ended with an unknown outcome: acked %d, failed %v",
				len(acked), failed)
		}
	}
	// The failed leader restarts from what its disk holds, on a healthy disk.
	victim.shutdown()
	c.nodes[lead] = nil
	os.Remove(controls[victim.cfg.NodeID])
	next := c.leader()
	for i := range 10 {
		k := fmt.Sprintf("after-%d", i)
		mustPut(t, c.nodes[next], k, k)
		acked[k] = true
	}
	c.restart(lead)
	next = c.leader()
	mustPut(t, c.nodes[next], "last", "x")
	acked["last"] = true
	target := c.nodes[next].Store().AppliedIndex()
	for i, n := range c.nodes {
		waitFor(t, 15*time.Second, fmt.Sprintf("n%d to catch up", i+1), func() bool {
			return n.Store().AppliedIndex() >= target
		})
		view := n.Store().View()
		for _, set := range []map[string]bool{acked, failed, unknown} {
			for k := range set {
				kv, err := view.Get([]byte(k), 0)
				switch {
				case acked[k] && (err != nil || string(kv.Value) == ""):
					t.Fatalf("n%d: acknowledged %s is gone: %v", i+1, k, err)
				case failed[k] && err == nil:
					t.Fatalf("n%d: %s was answered \"not applied\" yet is applied (version %d)", i+1, k, kv.Version)
				case err == nil && kv.Version != 1:
					t.Fatalf("n%d: %s applied %d times", i+1, k, kv.Version)
				}
			}
		}
	}
	t.Logf("%s fault: %d acknowledged, %d not applied, %d unknown", fault, len(acked), len(failed), len(unknown))
}

// TestFailedAppendOutcome: hashicorp/raft reports a leader's failed append as "unable
// to store logs". With a healthy WAL that error means the entry was cut from the log
// (certainly not applied: ErrNotLeader, retried elsewhere); once the WAL has failed
// the entry may still be on disk and come back, so the outcome is unknown
// (ErrTimeout), never "not applied".
func TestFailedAppendOutcome(t *testing.T) {
	control := filepath.Join(t.TempDir(), "faults")
	w, err := wal.OpenWith(t.TempDir(), wal.Options{FS: wal.FaultFS{Control: control}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	n := &Node{wal: w}
	raftErr := func(err error) error {
		return fmt.Errorf("unable to store logs within log store, err: %q", err)
	}
	if err := w.StoreLogs([]*hraft.Log{{Index: 1, Term: 1, Type: hraft.LogCommand}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(control, []byte("write"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = w.StoreLogs([]*hraft.Log{{Index: 2, Term: 1, Type: hraft.LogCommand, Data: make([]byte, 100)}})
	if err == nil || w.Failed() != nil {
		t.Fatalf("failed write: %v, store failed: %v; want a plain error", err, w.Failed())
	}
	if got := n.mapApplyErr(raftErr(err)); !errors.Is(got, ErrNotLeader) {
		t.Fatalf("a cut failed write maps to %v, want ErrNotLeader", got)
	}
	if err := os.WriteFile(control, []byte("sync"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = w.StoreLogs([]*hraft.Log{{Index: 2, Term: 1, Type: hraft.LogCommand}})
	if !errors.Is(err, wal.ErrFailed) {
		t.Fatalf("failed sync: %v, want ErrFailed", err)
	}
	if got := n.mapApplyErr(raftErr(err)); !errors.Is(got, ErrTimeout) || errors.Is(got, ErrNotLeader) {
		t.Fatalf("an append on a failed store maps to %v, want ErrTimeout", got)
	}
}
