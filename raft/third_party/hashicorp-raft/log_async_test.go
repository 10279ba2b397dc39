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
	asyncTestFail.Store(true)
	if err := leader.Apply([]byte("failed"), 0).Error(); err == nil {
		t.Fatal("the write whose leader write failed succeeded")
	}
	if got := leader.getLastIndex(); got != last {
		t.Fatalf("after the failed write the old leader's last index is %d, want %d", got, last)
	}
	var l Log
	if err := leader.logs.GetLog(last+1, &l); err == nil && string(l.Data) == "failed" {
		t.Fatal("the old leader still reads the failed entry")
	}
	// It may lead again, in a later term, only with a log a majority accepts.
	deadline := time.Now().Add(time.Second)
	for leader.State() == Leader && leader.getCurrentTerm() == term {
		if time.Now().After(deadline) {
			t.Fatal("the leader did not step down after its write failed")
		}
		time.Sleep(time.Millisecond)
	}
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
	if n > 1 {
		t.Fatalf("the failed entry was applied %d times", n)
	}
	t.Logf("the failed entry was applied %d times (on every server alike)", n)
}
