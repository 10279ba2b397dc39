package etcdjudge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// newSession is a session on its own client, closed with the test.
func newSession(t *testing.T, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(newClient(t), concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Lockers contend for one Mutex: never two inside at once, and the fencing revisions
// (the revision each holder's key was created at) increase in the order the lock
// was held.
func TestMutexContentionFencing(t *testing.T) {
	ctx := testCtx(t)
	const lockers, rounds = 4, 3
	var inside atomic.Int32
	var mu sync.Mutex
	var fences []int64
	var wg sync.WaitGroup
	errs := make(chan error, lockers)
	for i := range lockers {
		s := newSession(t, 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				m := concurrency.NewMutex(s, "/lock/contended")
				if err := m.Lock(ctx); err != nil {
					errs <- fmt.Errorf("locker %d: %w", i, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("locker %d entered with %d holders", i, n-1)
				}
				mu.Lock()
				fences = append(fences, m.Header().Revision)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					errs <- fmt.Errorf("locker %d unlock: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(fences) != lockers*rounds {
		t.Fatalf("%d lock holds, want %d", len(fences), lockers*rounds)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fencing revisions do not increase in lock order: %v", fences)
		}
	}
}

// A session whose lease expires (its keepalives stopped: the client died) releases
// its lock to the next locker.
func TestExpiredSessionReleasesLock(t *testing.T) {
	ctx := testCtx(t)
	dead := newSession(t, 2)
	m1 := concurrency.NewMutex(dead, "/lock/expiring")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	dead.Orphan() // no more keepalives, no revoke
	m2 := concurrency.NewMutex(newSession(t, 10), "/lock/expiring")
	start := time.Now()
	if err := m2.Lock(ctx); err != nil {
		t.Fatalf("the lock of an expired session was not released: %v", err)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Fatalf("the lock took %v to be released", waited)
	}
	if m2.Header().Revision <= m1.Header().Revision {
		t.Fatalf("fencing revision %d after %d", m2.Header().Revision, m1.Header().Revision)
	}
}

// Campaign, proclaim, observe, resign: observers see every leader value in order.
func TestElection(t *testing.T) {
	ctx := testCtx(t)
	e1 := concurrency.NewElection(newSession(t, 10), "/elect/")
	e2 := concurrency.NewElection(newSession(t, 10), "/elect/")
	obs := concurrency.NewElection(newSession(t, 10), "/elect/")
	if err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	ocx, cancel := context.WithCancel(ctx)
	defer cancel()
	values := obs.Observe(ocx)
	expect := func(want string) {
		t.Helper()
		select {
		case r, ok := <-values:
			if !ok || len(r.Kvs) == 0 || string(r.Kvs[0].Value) != want {
				t.Fatalf("observed %v (open %v), want leader value %q", r.Kvs, ok, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no leader value %q observed within 10 s", want)
		}
	}
	expect("a")
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "b") }()
	if err := e1.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	expect("a2")
	select {
	case err := <-won:
		t.Fatalf("a second campaign won while the first leads: %v", err)
	default:
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	expect("b")
	leader, err := obs.Leader(ctx)
	if err != nil || string(leader.Kvs[0].Value) != "b" {
		t.Fatalf("leader = %v, %v", leader, err)
	}
}
