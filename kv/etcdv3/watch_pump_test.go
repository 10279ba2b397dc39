package etcdv3

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// watchDoor is an etcd door over an in-memory store on loopback, and one Watch stream
// on it (etcd's generated client, no clientv3).
type watchDoor struct {
	store  *kvtest.LocalStore
	stream pb.Watch_WatchClient
}

func newWatchDoor(tb testing.TB, cfg kv.Config) *watchDoor {
	tb.Helper()
	store := kvtest.New()
	core, err := kv.NewServer(cfg, store, nil)
	if err != nil {
		tb.Fatal(err)
	}
	conn := serveDoor(tb, New(core))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a lost event fails, not hangs
	tb.Cleanup(cancel)
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return &watchDoor{store: store, stream: stream}
}

// create opens n watches of the keys key/00000.. and waits for their created answers;
// it returns their watch IDs by key index.
func (d *watchDoor) create(tb testing.TB, key string, n int) []int64 {
	tb.Helper()
	for i := range n {
		k := fmt.Appendf(nil, "%s/%05d", key, i)
		cr := &pb.WatchCreateRequest{Key: k}
		if err := d.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}); err != nil {
			tb.Fatal(err)
		}
	}
	ids := make([]int64, 0, n)
	for len(ids) < n {
		resp, err := d.stream.Recv()
		if err != nil {
			tb.Fatalf("after %d of %d created answers: %v", len(ids), n, err)
		}
		if !resp.Created || resp.Canceled {
			tb.Fatalf("create %d: %v", len(ids), resp)
		}
		ids = append(ids, resp.WatchId) // answers come in the order of the creates
	}
	return ids
}

func (d *watchDoor) put(tb testing.TB, key string) {
	tb.Helper()
	put := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte(key), Value: []byte("v")}}}
	if _, err := d.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: put}); err != nil {
		tb.Fatal(err)
	}
}

// goroutines is runtime.NumGoroutine once it has stopped falling (goroutines that
// finished a moment ago are gone).
func goroutines() int {
	n := runtime.NumGoroutine()
	for range 20 {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			return m
		}
		n = m
	}
	return n
}

// The etcd door serves every watch of a Watch stream from one pump goroutine, woken
// by the core's Notify, as the stream protocol does: 2,000 idle watches on one stream
// add a few goroutines, not 2,000 (kill: a goroutine per watch, the door before this
// test), and a put of each watched key still reaches its watch, once (kill: start
// does not mark the new watch ready, so its first Next, which registers it with the
// hub, never runs: no event comes).
func TestWatchStreamGoroutinesDoNotGrowWithWatches(t *testing.T) {
	const n = 2000
	d := newWatchDoor(t, kv.DefaultConfig())
	d.create(t, "warm", 1) // the stream's own goroutines
	before := goroutines()
	ids := d.create(t, "k", n)
	if after := goroutines(); after-before > 10 {
		t.Fatalf("%d watches on one stream: %d goroutines, %d before: want at most 10 more", n, after, before)
	}
	byID := make(map[int64]int, n)
	for i, id := range ids {
		byID[id] = i
	}
	for i := range n {
		d.put(t, fmt.Sprintf("k/%05d", i))
	}
	got := make([]bool, n)
	for seen := 0; seen < n; {
		resp, err := d.stream.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", seen, n, err)
		}
		i, ok := byID[resp.WatchId]
		if !ok || resp.Canceled || len(resp.Events) != 1 {
			t.Fatalf("answer %v: want one event of a created watch", resp)
		}
		if want := fmt.Sprintf("k/%05d", i); string(resp.Events[0].Kv.Key) != want || got[i] {
			t.Fatalf("watch %d (of %s) got %q (again: %v)", resp.WatchId, want, resp.Events[0].Kv.Key, got[i])
		}
		got[i] = true
		seen++
	}
}

// BenchmarkDoorIdleWatches10k opens 10,000 idle watches on one Watch stream and reports
// the heap and stacks they hold, per watch (client and server: both run in process,
// and the client's share is small for idle watches).
func BenchmarkDoorIdleWatches10k(b *testing.B) {
	const n = 10000
	cfg := kv.DefaultConfig()
	cfg.MaxWatches, cfg.MaxWatchesPerToken = 2*n, 2*n
	for b.Loop() {
		d := newWatchDoor(b, cfg)
		d.create(b, "warm", 1)
		before := inUse()
		d.create(b, "k", n)
		b.ReportMetric(float64(inUse()-before)/n, "B/watch")
	}
}

// inUse is the heap and stack memory in use after a collection.
func inUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// A canceled answer is a watch's last: the pump may be sending the watch's backlog when
// the cancel arrives, and the cancel waits for it, so no event of the watch follows
// (kill: cancelWatch ends the watch without its lock). A watch of the same stream
// goes on: it hears its event.
func TestWatchCancelIsTheLastAnswer(t *testing.T) {
	d := newWatchDoor(t, kv.DefaultConfig())
	for _, cr := range []*pb.WatchCreateRequest{{Key: []byte("c/"), RangeEnd: []byte("c0"), WatchId: 1}, {Key: []byte("z"), WatchId: 2}} {
		if err := d.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := d.stream.Recv(); err != nil || !resp.Created {
			t.Fatalf("create %d: %v %v", cr.WatchId, resp, err)
		}
	}
	const n = 20000
	go func() {
		for i := range n {
			put := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: fmt.Appendf(nil, "c/%05d", i), Value: []byte("v")}}}
			if _, err := d.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: put}); err != nil {
				t.Error(err)
				return
			}
		}
		put := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte("z"), Value: []byte("v")}}}
		if _, err := d.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: put}); err != nil {
			t.Error(err)
		}
	}()
	canceled, sent, other := false, false, false
	for !canceled || !other {
		resp, err := d.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case resp.WatchId == 2:
			other = true
		case resp.WatchId != 1:
			t.Fatalf("answer %v", resp)
		case canceled:
			t.Fatalf("watch 1 answered after its canceled answer: %d events", len(resp.Events))
		case resp.Canceled:
			canceled = true
		case !sent:
			sent = true
			cancel := &pb.WatchCancelRequest{WatchId: 1}
			if err := d.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: cancel}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A RequestProgress answer (watch ID -1) at revision R comes once every watch of the
// stream has sent every event up to R: 500 watches each hear a put, one revision each,
// and each answer follows every event at or below its revision; asked again, the
// answers reach the last put (kill: progressOnce answers the node's revision without
// serving the watches first).
func TestWatchRequestProgressFollowsEveryEvent(t *testing.T) {
	const n = 500
	d := newWatchDoor(t, kv.DefaultConfig())
	d.create(t, "p", n)
	first := d.revision(t) + 1
	for i := range n {
		d.put(t, fmt.Sprintf("p/%05d", i))
	}
	last := d.revision(t)
	if last != first+n-1 {
		t.Fatalf("puts at revisions %d..%d, want one each", first, last)
	}
	progress := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
	seen := map[int64]bool{} // event revisions received
	for rev := int64(0); rev < last; {
		if err := d.stream.Send(progress); err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := d.stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if resp.WatchId != -1 {
				for _, ev := range resp.Events {
					seen[ev.Kv.ModRevision] = true
				}
				continue
			}
			rev = resp.Header.Revision
			break
		}
		for r := first; r <= min(rev, last); r++ {
			if !seen[r] {
				t.Fatalf("progress at revision %d before the event at %d", rev, r)
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("%d events, want %d", len(seen), n)
	}
}

func (d *watchDoor) revision(tb testing.TB) int64 {
	view, err := d.store.View(context.Background(), fsm.Serializable)
	if err != nil {
		tb.Fatal(err)
	}
	return view.Revision()
}
