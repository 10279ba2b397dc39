package raft

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// freezableLogStore wraps a node's real log store; while frozen, StoreLogs blocks, and
// with it the Raft goroutine that called it. On a leader that is the main loop, the
// one that would notice a lost quorum or a newer term and step down: a frozen leader
// is a leader paused mid-term, as a stopped process or a long GC pause leaves it,
// still sure it leads.
type freezableLogStore struct {
	hraft.LogStore
	mu   sync.Mutex
	gate chan struct{} // non-nil while frozen; closed by thaw
	held atomic.Int32  // calls blocked now
}

func (s *freezableLogStore) freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

func (s *freezableLogStore) thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *freezableLogStore) StoreLogs(logs []*hraft.Log) error {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		s.held.Add(1)
		<-g
		s.held.Add(-1)
	}
	return s.LogStore.StoreLogs(logs)
}

func (s *freezableLogStore) StoreLog(l *hraft.Log) error { return s.StoreLogs([]*hraft.Log{l}) }

// TestPausedLeaderServesNoStaleRead: a leader paused mid-term (its main loop frozen)
// and cut off while the others elect a new leader and take a write still believes it
// leads. A linearizable read on it must not return the state before that write: the
// read index is confirmed by a heartbeat round (VerifyLeader), which a deposed leader
// cannot complete, so the read fails; once the old leader resumes and rejoins, its
// linearizable reads see the write.
func TestPausedLeaderServesNoStaleRead(t *testing.T) {
	stores := make([]*freezableLogStore, 3)
	c, network, ids := newProxiedCluster(t, 3, func(i int, cfg *Config) {
		cfg.wrapLogStore = func(s hraft.LogStore) hraft.LogStore {
			stores[i] = &freezableLogStore{LogStore: s}
			return stores[i]
		}
	})
	old := c.leader()
	mustPut(t, c.nodes[old], "k", "old")

	// Pause the leader: freeze its log, then hand it a write, which its main loop
	// blocks on; and cut it off.
	stores[old].freeze()
	t.Cleanup(stores[old].thaw) // before the nodes shut down (cleanups run last first)
	stuck := make(chan error, 1)
	go func() { _, err := c.nodes[old].Apply(context.Background(), putCmd("stuck", "x")); stuck <- err }()
	waitFor(t, 5*time.Second, "the leader's main loop to block on its log", func() bool { return stores[old].held.Load() > 0 })
	network.Partition([]string{ids[old]}, others(ids, old))
	defer network.Heal()

	next := -1
	waitFor(t, 10*time.Second, "a new leader among the others", func() bool {
		for i, n := range c.nodes {
			if i != old && n.IsLeader() {
				next = i
				return true
			}
		}
		return false
	})
	mustPut(t, c.nodes[next], "k", "new")
	if !c.nodes[old].IsLeader() {
		t.Fatal("the paused leader stepped down: the test needs it to believe it still leads")
	}
	checkRead := func(what string, d time.Duration) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		v, err := c.nodes[old].View(ctx, fsm.Linearizable)
		if err != nil {
			return err
		}
		kv, err := v.Get([]byte("k"), 0)
		if err != nil || string(kv.Value) != "new" {
			t.Fatalf("%s: linearizable read on the old leader returned k = %q (%v) at applied index %d, "+
				"missing the write acknowledged by the new leader", what, kv.Value, err, v.AppliedIndex())
		}
		return nil
	}
	err := checkRead("paused and cut off", time.Second)
	t.Logf("read on the paused, cut-off leader: %v", err)
	network.Heal()
	err = checkRead("paused, reconnected", time.Second)
	t.Logf("read on the paused, reconnected leader: %v", err)

	// Resume it: it learns of the new term, steps down and catches up; reads succeed.
	stores[old].thaw()
	deadline := time.Now().Add(20 * time.Second)
	for checkRead("resumed", 2*time.Second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no linearizable read succeeded on the resumed old leader within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-stuck; err == nil {
		t.Log("the write held by the pause was applied")
	} else if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrNotLeader) {
		t.Logf("the write held by the pause: %v", err)
	}
}
