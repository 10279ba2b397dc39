// Copyright IBM Corp. 2013, 2025
// SPDX-License-Identifier: MPL-2.0

// This file is keel's addition to hashicorp/raft v1.8.0 (PATCHES.md).

package raft

import (
	"errors"
	"testing"
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
