package wal

import (
	"errors"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
)

// storeAsync stores logs through StoreLogsAsync, checking that they are readable
// before wait makes them durable.
func storeAsync(t testing.TB, s *Store, logs []*hraft.Log) error {
	t.Helper()
	wait, err := s.StoreLogsAsync(logs)
	if err != nil {
		return err
	}
	last := logs[len(logs)-1]
	if got, _ := s.LastIndex(); got != last.Index {
		t.Fatalf("before wait: last index %d, want %d", got, last.Index)
	}
	var got hraft.Log
	if err := s.GetLog(last.Index, &got); errors.Is(err, errCrashed) {
		// the model's power loss came in the middle of the batch: nothing to read
	} else if err != nil || got.Term != last.Term {
		t.Fatalf("before wait: GetLog(%d) = term %d, %v; want term %d", last.Index, got.Term, err, last.Term)
	}
	return wait()
}

// TestStoreLogsAsync: the entries of StoreLogsAsync are readable at once, durable only
// after wait, and no other write reaches the file in between, so a power loss before
// wait can lose only that batch, as it can a StoreLogs in progress.
//
//	StoreLogs(1..10)       durable
//	StoreLogsAsync(11..15) readable, not durable   ← a power loss here keeps 1..10 and a prefix of 11..15
//	StoreLogs(16..17)      blocks until wait
//	wait()                 11..15 durable, then 16..17 written and synced
func TestStoreLogsAsync(t *testing.T) {
	m, s, acked := openAcked(t)
	batch := tlogs(11, 15, 1)
	wait, err := s.StoreLogsAsync(batch)
	if err != nil {
		t.Fatal(err)
	}
	wantExactly(t, s, append(acked, batch...))
	h := history{}
	h.add(acked)
	h.add(batch)
	for _, tail := range []tailFunc{tailNone, tailAll} {
		checkAllowed(t, contents(t, openMem(t, m.crash(-1, tail))), expect{must: acked, tail: batch}, h)
	}
	next := tlogs(16, 17, 1)
	done := make(chan error, 1)
	go func() { done <- s.StoreLogs(next) }()
	select {
	case err := <-done:
		t.Fatalf("StoreLogs ran before the async batch was durable: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	all := append(append(acked, batch...), next...)
	wantExactly(t, openMem(t, m.crash(0, tailNone)), all)
}

// TestStoreLogsAsyncFailedSync: when wait's fdatasync fails, the batch readers saw is
// taken back (the caller's replication may still have sent it: its outcome is
// unknown) and the store fails for good.
func TestStoreLogsAsyncFailedSync(t *testing.T) {
	m, s, acked := openAcked(t)
	m.failOnce("sync", segPrefix, errEIO)
	wait, err := s.StoreLogsAsync(tlogs(11, 12, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(); !errors.Is(err, ErrFailed) || !errors.Is(err, errEIO) {
		t.Fatalf("wait with a failing fdatasync = %v, want ErrFailed wrapping EIO", err)
	}
	if err := wait(); !errors.Is(err, ErrFailed) {
		t.Fatalf("second wait = %v, want the same error", err)
	}
	wantExactly(t, s, acked)
	var l hraft.Log
	if err := s.GetLog(11, &l); !errors.Is(err, hraft.ErrLogNotFound) {
		t.Fatalf("GetLog(11) after the failed sync = %v, want ErrLogNotFound", err)
	}
	if _, err := s.StoreLogsAsync(tlogs(11, 11, 2)); !errors.Is(err, ErrFailed) {
		t.Fatalf("StoreLogsAsync after the failure = %v, want ErrFailed", err)
	}
}
