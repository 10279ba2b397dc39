package raft

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadBatchFetchesAfterEachRead: every read's index comes from a fetch that
// started after the read asked (so it sees every write acknowledged before), and
// concurrent reads share fetches (kill: a read that joins the fetch in flight; a
// fetch per read).
func TestReadBatchFetchesAfterEachRead(t *testing.T) {
	var started atomic.Int64
	b := &readBatch{fetch: func() (uint64, error) {
		n := started.Add(1)
		time.Sleep(time.Millisecond)
		return uint64(n), nil
	}}
	const readers, reads = 32, 40
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range reads {
				before := started.Load()
				idx, err := b.get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if int64(idx) <= before {
					t.Errorf("read index from fetch %d, but fetch %d had started before the read", idx, before)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := started.Load(); n >= readers*reads/2 {
		t.Errorf("%d fetches for %d reads: not shared", n, readers*reads)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.fetch = func() (uint64, error) { time.Sleep(50 * time.Millisecond); return 1, nil }
	if _, err := b.get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read whose context ended: %v", err)
	}
}
