package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/kv/stream"
)

// collect reads n change events (progress skipped) from events, failing on an error.
func collect(t *testing.T, events <-chan client.WatchEvent, n int) []client.WatchEvent {
	t.Helper()
	var got []client.WatchEvent
	timeout := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case ev, ok := <-events:
			if !ok || ev.Err != nil {
				t.Fatalf("watch ended after %d events: %v", len(got), ev.Err)
			}
			if ev.Type != api.EventProgress {
				got = append(got, ev)
			}
		case <-timeout:
			t.Fatalf("only %d of %d events", len(got), n)
		}
	}
	return got
}

// apply puts key=value straight through the store (no client request).
func (f *fixture) apply(t *testing.T, key, value string) {
	t.Helper()
	res, err := f.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte(key), Value: []byte(value)}}}})
	if err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
}

// TestStreamWatchMatchesHTTP: a watch over the stream protocol delivers exactly what
// the same watch over HTTP delivers — puts, deletes, a transaction's events, prev_kv
// — and sends nothing over HTTP.
func TestStreamWatchMatchesHTTP(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start, err := f.c.Put(ctx, "w/a", []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	sc := f.streamClient(t, f.url)
	opts := client.WatchOptions{StartRevision: start, PrevKV: true, Progress: time.Second}
	viaStream := sc.Watch(ctx, "w/", opts)
	viaHTTP := f.c.Watch(ctx, "w/", opts)
	for i := 0; i < 20; i++ {
		if _, err := f.c.Put(ctx, fmt.Sprintf("w/%c", 'a'+i%3), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.c.Delete(ctx, "w/b"); err != nil {
		t.Fatal(err)
	}
	f.putMany(t, "w/t%02d", 5) // one transaction, five events at one revision
	const n = 1 + 20 + 1 + 5
	a, b := collect(t, viaStream, n), collect(t, viaHTTP, n)
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Fatalf("event %d: stream %+v, HTTP %+v", i, a[i], b[i])
		}
		if i > 0 && a[i].Revision < a[i-1].Revision {
			t.Fatalf("event %d out of order", i)
		}
	}
	if a[0].Revision != start || a[n-1].Revision != a[n-5].Revision || a[1].PrevKV == nil || a[21].Type != api.EventDelete {
		t.Fatalf("events %+v", a)
	}
}

// TestStreamWatchManyOnOneConnection: 50 watches of one client share its stream
// connection; each gets exactly its own prefix's events, and cancelling half leaves
// the others running.
func TestStreamWatchManyOnOneConnection(t *testing.T) {
	f := newFixture(t)
	sc := f.streamClient(t, f.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const watches = 50
	chans := make([]<-chan client.WatchEvent, watches)
	cancels := make([]context.CancelFunc, watches)
	for i := range chans {
		wctx, wcancel := context.WithCancel(ctx)
		cancels[i] = wcancel
		chans[i] = sc.Watch(wctx, fmt.Sprintf("m%02d/", i), client.WatchOptions{StartRevision: 1})
	}
	for i := 0; i < watches; i++ {
		f.apply(t, fmt.Sprintf("m%02d/k", i), "x")
	}
	for i, ch := range chans {
		ev := collect(t, ch, 1)[0]
		if ev.KV.Key != fmt.Sprintf("m%02d/k", i) {
			t.Fatalf("watch %d got %+v", i, ev)
		}
	}
	for i := 0; i < watches; i += 2 {
		cancels[i]()
	}
	for i := 0; i < watches; i++ {
		f.apply(t, fmt.Sprintf("m%02d/k", i), "y")
	}
	for i := 1; i < watches; i += 2 {
		if ev := collect(t, chans[i], 1)[0]; string(ev.KV.Value) != "y" {
			t.Fatalf("watch %d got %+v", i, ev)
		}
	}
	if n := f.sent.n.Load(); n != 0 {
		t.Fatalf("%d requests over HTTP from the stream client", n)
	}
}

// TestStreamWatchCompacted: a watch from a compacted revision fails with a 410 that
// carries the compact revision, over the stream as over HTTP.
func TestStreamWatchCompacted(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last int64
	for i := 0; i < 5; i++ {
		rev, err := f.c.Put(ctx, "c/k", []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		last = rev
	}
	if _, err := f.c.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	sc := f.streamClient(t, f.url)
	ev := <-sc.Watch(ctx, "c/", client.WatchOptions{StartRevision: last - 1})
	e, ok := ev.Err.(*client.Error)
	if !ok || !client.IsCompacted(ev.Err) || e.CompactRevision != last {
		t.Fatalf("watch from a compacted revision: %+v, want a 410 with compact_revision %d", ev, last)
	}
}

// TestStreamWatchSlowConsumer: a consumer that takes one event at a time still gets
// every revision once, in order, over the stream.
func TestStreamWatchSlowConsumer(t *testing.T) {
	f := newFixture(t, func(c *kv.Config) { c.WatchBuffer = 4 })
	sc := f.streamClient(t, f.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := f.store.FSM().Revision()
	events := sc.Watch(ctx, "s/", client.WatchOptions{StartRevision: base + 1, Buffer: 1})
	const n = 500
	for i := 0; i < n; i++ {
		res, err := f.store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte("s/a"), Value: []byte(fmt.Sprint(i))}}}})
		if err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
	}
	for i, ev := range collect(t, events, n) {
		if ev.Revision != base+1+int64(i) || string(ev.KV.Value) != fmt.Sprint(i) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
}

// TestStreamWatchFallsBackToHTTP: a node that predates the stream protocol serves a
// stream client's watch over HTTP.
func TestStreamWatchFallsBackToHTTP(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(core)
	stream.Attach(srv)
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.PathStream {
			http.Error(w, `{"code":404,"reason":"NotFound","message":"kv: no such route"}`, http.StatusNotFound)
			return
		}
		srv.Handler().ServeHTTP(w, r)
	})
	hs := httptest.NewServer(old)
	defer hs.Close()
	f := &fixture{store: store, url: hs.URL, sent: &countingTransport{}}
	c := f.streamClient(t, hs.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := c.Watch(ctx, "f/", client.WatchOptions{StartRevision: 1})
	rev, err := c.Put(ctx, "f/k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := collect(t, events, 1)[0]; ev.Revision != rev || string(ev.KV.Value) != "v" {
		t.Fatalf("event %+v", ev)
	}
	if n := f.sent.n.Load(); n != 2 {
		t.Fatalf("%d requests over HTTP, want 2 (the watch and the put)", n)
	}
}

// BenchmarkStreamWatchFanOut1000: one writer, 1,000 stream watches of one prefix on
// one client connection, in process (no Raft); reports events delivered per second.
func BenchmarkStreamWatchFanOut1000(b *testing.B) {
	f := newFixture(b, func(c *kv.Config) { c.MaxStreamWatches = 2000 })
	sc := f.streamClient(b, f.url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const watchers = 1000
	start := f.store.FSM().Revision() + 1
	var wg sync.WaitGroup
	var got atomic.Int64
	for range watchers {
		ch := sc.Watch(ctx, "fan/", client.WatchOptions{StartRevision: start, Buffer: 1024})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				if ev.Type == api.EventPut {
					got.Add(1)
				}
			}
		}()
	}
	val := make([]byte, 256)
	put := func() {
		res, err := f.store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte("fan/k"), Value: val}}}})
		if err != nil || res.Err != nil {
			b.Fatal(err, res.Err)
		}
	}
	put() // every watcher live before the clock starts
	for deadline := time.Now().Add(time.Minute); got.Load() < watchers; {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d watchers live", got.Load(), watchers)
		}
		time.Sleep(time.Millisecond)
	}
	got.Store(0)
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		put()
		// Keep every watcher within 256 revisions (its buffer is 1,024 events): a
		// writer flat out would end watches as slow and measure their replays.
		for got.Load() < int64(i-256)*watchers && time.Since(t0) < time.Minute {
			time.Sleep(100 * time.Microsecond)
		}
	}
	for got.Load() < int64(b.N)*watchers && time.Since(t0) < time.Minute {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(got.Load())/time.Since(t0).Seconds(), "events/s")
	cancel()
	wg.Wait()
}

// TestStreamWatchOldStreamNode: a node whose stream protocol predates watches answers
// a watch frame with a 400 (unknown op); the client watches over HTTP instead and
// gets every event.
func TestStreamWatchOldStreamNode(t *testing.T) {
	f := oldStreamNode(t)
	c := f.streamClient(t, f.url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := c.Watch(ctx, "o/", client.WatchOptions{StartRevision: 1})
	f.apply(t, "o/k", "v")
	if ev := collect(t, events, 1)[0]; ev.Revision != 1 || string(ev.KV.Value) != "v" {
		t.Fatalf("event %+v", ev)
	}
	if n := f.sent.n.Load(); n != 1 {
		t.Fatalf("%d requests over HTTP, want 1 (the watch)", n)
	}
}
