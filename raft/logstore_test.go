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
				if _, err := c.nodes[lead].Apply(context.Background(), putCmd(fmt.Sprintf("during-%d-%d", w, i), "x")); err != nil {
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
	waitFor(t, 15*time.Second, "the follower that failed appends to catch up", func() bool {
		return c.nodes[victim].Store().AppliedIndex() >= c.nodes[lead].Store().AppliedIndex()
	})
	if got, want := c.nodes[victim].Store().View().Hash(), c.nodes[lead].Store().View().Hash(); got != want {
		t.Fatalf("follower state %x != leader state %x", got, want)
	}
}

// TestLogSyncFailureStopsTheNode: when the leader's fdatasync fails, its log store
// refuses every later write, the leader steps down and stops (LogFailed), the others
// elect a leader and keep every acknowledged write; restarted with a healthy disk, the
// node recovers from what is on disk and catches up.
func TestLogSyncFailureStopsTheNode(t *testing.T) {
	controls := map[string]string{}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.LogFaults = filepath.Join(t.TempDir(), "faults")
		controls[cfg.NodeID] = cfg.LogFaults
	})
	lead := c.leader()
	victim := c.nodes[lead]
	acked := map[string]string{}
	for i := range 20 {
		k := fmt.Sprintf("before-%d", i)
		mustPut(t, victim, k, k)
		acked[k] = k
	}
	if err := os.WriteFile(controls[victim.cfg.NodeID], []byte("sync"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Writes through the failing leader: none may be acknowledged unless it is
	// replicated and applied elsewhere.
	for i := range 5 {
		k := fmt.Sprintf("during-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := victim.Apply(ctx, putCmd(k, k))
		cancel()
		if err == nil && res.Err == nil {
			acked[k] = k
		}
	}
	select {
	case err := <-victim.LogFailed():
		if !errors.Is(err, wal.ErrFailed) && !strings.Contains(err.Error(), "injected") {
			t.Fatalf("LogFailed = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's log failed but LogFailed did not fire")
	}
	waitFor(t, 10*time.Second, "the failed node to stop", func() bool {
		victim.closeMu.Lock()
		defer victim.closeMu.Unlock()
		return victim.closed
	})
	c.nodes[lead] = nil
	next := c.leader()
	for i := range 20 {
		k := fmt.Sprintf("after-%d", i)
		mustPut(t, c.nodes[next], k, k)
		acked[k] = k
	}
	view := c.nodes[next].Store().View()
	for k, v := range acked {
		kv, err := view.Get([]byte(k), 0)
		if err != nil || string(kv.Value) != v {
			t.Fatalf("acknowledged %s: %v %q", k, err, kv.Value)
		}
	}
	// A healthy disk again: the node restarts from what is on disk and catches up.
	os.Remove(controls[victim.cfg.NodeID])
	c.restart(lead)
	waitFor(t, 15*time.Second, "the restarted node to catch up", func() bool {
		return c.nodes[lead].Store().AppliedIndex() >= c.nodes[next].Store().AppliedIndex()
	})
	if got, want := c.nodes[lead].Store().View().Hash(), c.nodes[next].Store().View().Hash(); got != want {
		t.Fatalf("restarted node state %x != leader state %x", got, want)
	}
}
