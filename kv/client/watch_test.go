package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// A watcher that does not read is ended by the server as slow (a 4-event server
// buffer, values of 4 KiB so the connection's buffers fill); the client says so
// through OnResume, resumes from the next revision, and delivers every revision once.
func TestWatchSlowResumeReported(t *testing.T) {
	f := newFixture(t, func(c *kv.Config) { c.WatchBuffer = 4 })
	base := f.store.FSM().Revision()
	var mu sync.Mutex
	var resumes []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := f.c.Watch(ctx, "w/", client.WatchOptions{StartRevision: base + 1, Buffer: 1,
		OnResume: func(err error) { mu.Lock(); resumes = append(resumes, err); mu.Unlock() }})
	const n = 2000
	val := []byte(strings.Repeat("x", 4096))
	for i := 0; i < n; i++ {
		if i == 1 { // the watch is live (registered with the hub) before the burst
			if ev := <-events; ev.Revision != base+1 {
				t.Fatalf("first event %+v, want revision %d", ev, base+1)
			}
		}
		res, err := f.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte("w/a"), Value: val}}}})
		if err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
	}
	next := base + 2
	for next <= base+n {
		ev := <-events
		if ev.Err != nil {
			t.Fatalf("watch ended at %d: %v", next, ev.Err)
		}
		if ev.Type != api.EventPut {
			continue
		}
		if ev.Revision != next {
			t.Fatalf("event at revision %d, want %d (gap or duplicate)", ev.Revision, next)
		}
		next++
	}
	mu.Lock()
	defer mu.Unlock()
	slow := 0
	for _, err := range resumes {
		if errors.Is(err, client.ErrWatchEnded) && strings.Contains(err.Error(), api.ReasonSlowWatcher) {
			slow++
		}
	}
	if slow == 0 {
		t.Fatalf("no SlowWatcher resume reported (resumes: %v)", resumes)
	}
}
