// Copyright IBM Corp. 2013, 2025
// SPDX-License-Identifier: MPL-2.0

// This file is keel's addition to hashicorp/raft v1.8.0 (PATCHES.md).

package raft

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// asyncInmem is an AsyncLogStore over InmemStore whose wait fails when told to,
// taking the entries back as the contract says.
type asyncInmem struct {
	*InmemStore
	fail error
}

func (s *asyncInmem) StoreLogsAsync(logs []*Log) (func() error, error) {
	if err := s.InmemStore.StoreLogs(logs); err != nil {
		return nil, err
	}
	return func() error {
		if s.fail != nil {
			s.InmemStore.DeleteRange(logs[0].Index, logs[len(logs)-1].Index)
			return s.fail
		}
		return nil
	}, nil
}

func TestLogCacheStoreLogsAsync(t *testing.T) {
	store := &asyncInmem{InmemStore: NewInmemStore()}
	c, _ := NewLogCache(16, store)
	logs := []*Log{{Index: 1, Term: 1}, {Index: 2, Term: 1}}
	wait, err := c.StoreLogsAsync(logs)
	if err != nil {
		t.Fatal(err)
	}
	var out Log
	if err := c.GetLog(2, &out); err != nil || out.Term != 1 {
		t.Fatalf("before wait: GetLog(2) = %+v, %v", out, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	// A failed wait takes the entries out of the cache too.
	store.fail = errors.New("injected")
	wait, err = c.StoreLogsAsync([]*Log{{Index: 3, Term: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(); err == nil {
		t.Fatal("wait did not report the failed write")
	}
	if err := c.GetLog(3, &out); !errors.Is(err, ErrLogNotFound) {
		t.Fatalf("after a failed wait: GetLog(3) = %+v, %v; want ErrLogNotFound", out, err)
	}
	if err := c.GetLog(2, &out); err != nil {
		t.Fatalf("GetLog(2) = %v", err)
	}

	// A store that is not an AsyncLogStore is written before StoreLogsAsync returns.
	plain := NewInmemStore()
	c, _ = NewLogCache(16, plain)
	wait, err = c.StoreLogsAsync(logs)
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := plain.LastIndex(); last != 2 {
		t.Fatalf("plain store: last index %d before wait, want 2", last)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestRaft_AsyncLogsFailedWait: the leader's own write fails after it sent the batch.
// It steps down with its last log back where it was, the write's future fails, and the
// entry — which the followers may hold — ends up applied on every server or on none,
// never replaced by another entry at its index.
func TestRaft_AsyncLogsFailedWait(t *testing.T) {
	t.Setenv("RAFT_TEST_ASYNC_LOGS", "1")
	c := MakeCluster(3, t, nil)
	defer c.Close()
	leader := c.Leader()
	for i := 0; i < 10; i++ {
		if err := leader.Apply([]byte(fmt.Sprintf("before-%d", i)), 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	last, term := leader.getLastIndex(), leader.getCurrentTerm()
	asyncTestFailAt.Store(last + 1)
	// The leader answers once two followers hold the entry, its own write pending or
	// not (PATCHES.md §4); then the entry is committed and must end up applied once
	// everywhere. Otherwise the write fails, and the entry is applied everywhere
	// alike, once at most.
	answered := leader.Apply([]byte("failed"), 0).Error() == nil
	deadline := time.Now().Add(time.Second)
	for leader.State() == Leader && leader.getCurrentTerm() == term {
		if time.Now().After(deadline) {
			t.Fatal("the leader did not step down after its write failed")
		}
		time.Sleep(time.Millisecond)
	}
	// Read before a new leader can send the entry back (an election timeout, 50 ms).
	if got := leader.getLastIndex(); got != last {
		t.Fatalf("after the failed write the old leader's last index is %d, want %d", got, last)
	}
	var l Log
	if err := leader.logs.GetLog(last+1, &l); err == nil && string(l.Data) == "failed" {
		t.Fatal("the old leader still reads the failed entry")
	}
	// It may lead again, in a later term, only with a log a majority accepts.
	next := c.Leader()
	for i := 0; i < 10; i++ {
		if err := next.Apply([]byte(fmt.Sprintf("after-%d", i)), 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	c.EnsureSame(t)
	n := 0
	for _, b := range getMockFSM(c.fsms[0]).Logs() {
		if string(b) == "failed" {
			n++
		}
	}
	if n > 1 || (answered && n != 1) {
		t.Fatalf("the failed entry was applied %d times (its write was answered: %v)", n, answered)
	}
	t.Logf("the failed entry was applied %d times (on every server alike)", n)
}

// TestRaft_AsyncLogsVanishedEndSendsNoSnapshot: after a failed leader write, a
// follower that holds (and acked) the failed batch has a next index past the old
// leader's restored last log, and a replicator may still run before the step-down
// stops it. The entry it cannot read vanished from the log's end, which is not a
// follower too far behind: replicateTo must not send the (older) latest snapshot,
// which the follower would install over the newer state it holds. The window is a
// few microseconds in a live cluster, so the test calls replicateTo itself, on a
// leader with a snapshot whose write of last+1 failed, for a follower that holds it.
func TestRaft_AsyncLogsVanishedEndSendsNoSnapshot(t *testing.T) {
	c := MakeCluster(3, t, nil)
	defer c.Close()
	leader := c.Leader()
	for i := 0; i < 10; i++ {
		if err := leader.Apply([]byte(fmt.Sprintf("before-%d", i)), 0).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := leader.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	follower := c.Followers()[0]
	last := leader.getLastIndex()
	for deadline := time.Now().Add(time.Second); follower.getLastIndex() != last; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not catch up")
		}
	}
	s := &followerReplication{
		currentTerm: leader.getCurrentTerm(),
		nextIndex:   last + 2, // the follower acked an entry at last+1 the leader no longer holds
		peer:        Server{ID: follower.localID, Address: follower.localAddr},
		commitment:  newCommitment(make(chan struct{}, 1), leader.getLatestConfiguration(), 1),
		stopCh:      make(chan uint64, 1),
		triggerCh:   make(chan struct{}, 1),
		notify:      make(map[*verifyFuture]struct{}),
		notifyCh:    make(chan struct{}, 1),
		stepDown:    make(chan struct{}, 1),
	}
	leader.pendingWriteFrom.Store(last + 1) // as the failed write of last+1 left it
	leader.replicateTo(s, last+1)
	if idx, _ := follower.getLastSnapshot(); idx != 0 {
		t.Fatalf("the follower installed the leader's snapshot at %d for an entry that vanished from the log's end", idx)
	}
}

// TestRaft_AsyncLogsFailedConfigurationWait: a configuration entry whose leader write
// failed is not the leader's configuration: its log no longer holds that entry.
func TestRaft_AsyncLogsFailedConfigurationWait(t *testing.T) {
	t.Setenv("RAFT_TEST_ASYNC_LOGS", "1")
	c := MakeCluster(3, t, nil)
	defer c.Close()
	leader := c.Leader()
	last := leader.getLastIndex()
	asyncTestFailAt.Store(last + 1)
	if err := leader.AddVoter("ghost", "ghost-addr", 0, 0).Error(); err == nil {
		t.Fatal("the configuration change whose leader write failed succeeded")
	}
	// Well before an election timeout (50 ms), after which a new leader may commit
	// the entry the followers hold and send it back.
	time.Sleep(5 * time.Millisecond)
	var l Log
	held := leader.logs.GetLog(last+1, &l) == nil
	for _, s := range leader.getLatestConfiguration().Servers {
		if s.ID == "ghost" && !held {
			t.Fatalf("the old leader's configuration has the server whose entry (index %d) its log does not hold", last+1)
		}
	}
}

// TestRaft_AsyncLogsCommitWhileLeaderWrites: the leader's main loop does not wait for
// its own write (PATCHES.md §4). With the leader's disk stuck, a write that both
// followers hold commits and is answered; the leader takes no new entries until its
// write ends, and then goes on with one log.
func TestRaft_AsyncLogsCommitWhileLeaderWrites(t *testing.T) {
	t.Setenv("RAFT_TEST_ASYNC_LOGS", "1")
	c := MakeCluster(3, t, nil)
	defer c.Close()
	leader := c.Leader()
	if err := leader.Apply([]byte("before"), 0).Error(); err != nil {
		t.Fatal(err)
	}
	hold := &testHold{from: leader.getLastIndex() + 1, release: make(chan struct{})}
	asyncTestHold.Store(hold)
	released := false
	release := func() {
		if !released {
			released = true
			asyncTestHold.Store(nil)
			close(hold.release)
		}
	}
	defer release()
	stuck := leader.Apply([]byte("stuck"), 0)
	done := make(chan error, 1)
	go func() { done <- stuck.Error() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write both followers hold was not answered while the leader's own write was pending")
	}
	// The next write waits for the leader's own write to end (Apply itself may
	// block: the leader loop does not take it from the apply channel).
	next := make(chan error, 1)
	go func() { next <- leader.Apply([]byte("next"), 0).Error() }()
	select {
	case err := <-next:
		t.Fatalf("a write was answered while the leader's write before it was pending: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	c.EnsureSame(t)
	if got := getMockFSM(c.fsms[0]).Logs(); len(got) != 3 {
		t.Fatalf("%d entries applied, want 3", len(got))
	}
}
