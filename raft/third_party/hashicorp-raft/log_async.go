// Copyright IBM Corp. 2013, 2025
// SPDX-License-Identifier: MPL-2.0

// This file is keel's addition to hashicorp/raft v1.8.0 (PATCHES.md).

package raft

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// AsyncLogStore is a LogStore that can make a batch of entries readable before they
// are durable, so that a leader sends a batch to its followers while it writes the
// batch to its own disk (the Raft thesis, §10.2.1). The leader counts itself toward a
// commit quorum only once its own write is durable; followers still make entries
// durable before they answer, so an entry is committed only when a majority holds it
// on disk, the leader among them or not.
//
// StoreLogsAsync starts appending logs, which follow the log as for StoreLogs. When it
// returns an error, nothing of logs was stored (as for a failed StoreLogs) and wait is
// nil. Otherwise GetLog (and LastIndex) already see every entry of logs, and wait must
// be called exactly once: it returns nil once the entries are durable. Raft calls it
// before its next StoreLogs, but the snapshot goroutine's DeleteRange may come while a
// batch is pending: the store must hold it (and any other write) until wait returns, as
// keel's WAL does with its write lock. If wait returns an error, the store holds none of logs any more
// — GetLog no longer returns them — and the caller must treat the outcome of the batch
// as unknown: another server may hold the entries and commit them. A store may do the
// durable write in wait itself, on the caller's goroutine.
type AsyncLogStore interface {
	LogStore
	StoreLogsAsync(logs []*Log) (wait func() error, err error)
}

// StoreLogsAsync implements AsyncLogStore: the entries enter the cache at once, so
// the leader's replication reads them while they are being written. When the store
// below is not an AsyncLogStore the entries are stored synchronously first, as by
// StoreLogs, and wait returns nil.
func (c *LogCache) StoreLogsAsync(logs []*Log) (func() error, error) {
	as, ok := c.store.(AsyncLogStore)
	if !ok {
		if err := c.StoreLogs(logs); err != nil {
			return nil, err
		}
		return func() error { return nil }, nil
	}
	wait, err := as.StoreLogsAsync(logs)
	if err != nil {
		return nil, fmt.Errorf("unable to store logs within log store, err: %q", err)
	}
	c.l.Lock()
	for _, l := range logs {
		c.cache[l.Index%uint64(len(c.cache))] = l
	}
	c.l.Unlock()
	return func() error {
		if err := wait(); err != nil {
			c.forget(logs)
			return fmt.Errorf("unable to store logs within log store, err: %q", err)
		}
		return nil
	}, nil
}

// forget drops logs from the cache: their write failed.
func (c *LogCache) forget(logs []*Log) {
	c.l.Lock()
	defer c.l.Unlock()
	for _, l := range logs {
		slot := l.Index % uint64(len(c.cache))
		if c.cache[slot] == l {
			c.cache[slot] = nil
		}
	}
}

// storeLogsAsync starts storing logs in store, asynchronously if it is an
// AsyncLogStore, else synchronously (wait then returns nil).
func storeLogsAsync(store LogStore, logs []*Log) (wait func() error, err error) {
	if as, ok := store.(AsyncLogStore); ok {
		return as.StoreLogsAsync(logs)
	}
	if err := store.StoreLogs(logs); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

// asyncTestLogs makes a test cluster's LogStore an AsyncLogStore behind a LogCache
// (RAFT_TEST_ASYNC_LOGS=1 in makeCluster), so the upstream test suite runs the
// leader's write-while-replicating path: wait yields for a moment before it returns,
// so the replicators send, and followers may commit, before the leader counts itself.
type asyncTestLogs struct{ LogStore }

func newAsyncTestLogs(store LogStore) LogStore {
	c, _ := NewLogCache(64, asyncTestLogs{store})
	return c
}

// asyncTestFailAt, when set to an index, makes the wait of the asyncTestLogs batch
// holding that index fail (once): the entries are taken back out of the store, as
// AsyncLogStore requires. (An index, not "the next wait": the leader's write of an
// earlier batch may still be pending when a test arms it.)
var asyncTestFailAt atomic.Uint64

// asyncTestHold, when set, makes the wait of every asyncTestLogs batch from index
// from on block until release is closed: a leader whose own disk is stuck.
var asyncTestHold atomic.Pointer[testHold]

type testHold struct {
	from    uint64
	release chan struct{}
}

func (s asyncTestLogs) StoreLogsAsync(logs []*Log) (func() error, error) {
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return nil, err
	}
	return func() error {
		time.Sleep(200 * time.Microsecond)
		if hold := asyncTestHold.Load(); hold != nil && logs[len(logs)-1].Index >= hold.from {
			<-hold.release
		}
		if at := asyncTestFailAt.Load(); at >= logs[0].Index && at <= logs[len(logs)-1].Index &&
			asyncTestFailAt.CompareAndSwap(at, 0) {
			if err := s.LogStore.DeleteRange(logs[0].Index, logs[len(logs)-1].Index); err != nil {
				return err
			}
			return errors.New("injected: sync failed")
		}
		return nil
	}, nil
}

// vanishedFromEnd reports whether a replicator's ErrLogNotFound, replicating from
// nextIndex up to lastIndex, is for an entry of the batch whose leader write failed —
// it vanished from the log's end, and the leader is stepping down — rather than for one
// compacted away from the log's front. Only the second means the follower is too far
// behind for entries and needs the latest snapshot; sending that snapshot to a follower
// holding the failed batch would take it back to an older state. It finds the missing
// index again, reading what setupAppendEntries reads.
func (r *Raft) vanishedFromEnd(nextIndex, lastIndex uint64) bool {
	pending := r.pendingWriteFrom.Load()
	if pending == 0 {
		return false
	}
	from := nextIndex
	if snapIdx, _ := r.getLastSnapshot(); nextIndex > 1 && nextIndex-1 != snapIdx {
		from = nextIndex - 1 // the previous entry, as setPreviousLog reads it
	}
	to := max(from, min(nextIndex+uint64(r.config().MaxAppendEntries)-1, lastIndex))
	var l Log
	for i := from; i <= to; i++ {
		if err := r.logs.GetLog(i, &l); err == ErrLogNotFound {
			return i >= pending
		}
	}
	return false
}
