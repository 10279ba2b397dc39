package stream_test

import (
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// TestStreamWatchFrames: watches share one connection with requests. A watch is
// created (with the node's revision), gets each revision's events in one frame with
// prev_kv, a progress frame when idle, and a Canceled end on cancel, after which it
// gets nothing; a second watch on the same connection is unaffected.
func TestStreamWatchFrames(t *testing.T) {
	ts := newTestServer(t)
	r0 := ts.put("p/a", "0")
	conn, br := rawStream(t, ts)
	sendReq(t, conn, api.StreamRequest{ID: 1, Op: api.StreamWatch, Key: []byte("p/"), Prefix: true, PrevKV: true,
		Progress: 200 * time.Millisecond})
	sendReq(t, conn, api.StreamRequest{ID: 2, Op: api.StreamWatch, Key: []byte("p/b"), Revision: r0})
	created := map[uint64]api.StreamResponse{}
	for len(created) < 2 {
		r := readResponse(t, br)
		if r.Err != nil || r.Op != api.StreamWatch || r.Watch != api.StreamWatchCreated || r.Revision != r0 {
			t.Fatalf("want created at %d, got %+v (err %+v)", r0, r, r.Err)
		}
		created[r.ID] = r
	}
	// A transaction over two keys: one frame, both events, same revision.
	code, body, _ := ts.do(http.MethodPost, api.PathTxn, []byte(`{"success":[{"type":"put","key":"p/a","value":"MQ=="},{"type":"put","key":"p/b","value":"Mg=="}]}`))
	if code != http.StatusOK {
		t.Fatalf("txn = %d %s", code, body)
	}
	got := map[uint64]api.StreamResponse{}
	for len(got) < 2 {
		r := readResponse(t, br)
		if r.Watch == api.StreamWatchProgress {
			continue
		}
		got[r.ID] = r
	}
	w1, w2 := got[1], got[2]
	if w1.Watch != api.StreamWatchEvents || len(w1.Events) != 2 || w1.Events[0].KV.Key != "p/a" ||
		w1.Events[1].KV.Key != "p/b" || string(w1.Events[0].KV.Value) != "1" || w1.Events[0].PrevKV == nil ||
		string(w1.Events[0].PrevKV.Value) != "0" || w1.Events[1].PrevKV != nil || w1.Revision != r0+1 {
		t.Fatalf("watch 1 frame %+v", w1)
	}
	if w2.Watch != api.StreamWatchEvents || len(w2.Events) != 1 || w2.Events[0].KV.Key != "p/b" || w2.Events[0].PrevKV != nil {
		t.Fatalf("watch 2 (key p/b, no prev_kv) frame %+v", w2)
	}
	// Idle: watch 1 sends progress at the node's revision.
	for {
		r := readResponse(t, br)
		if r.ID == 1 && r.Watch == api.StreamWatchProgress {
			if r.Revision != r0+1 {
				t.Fatalf("progress at %d, want %d", r.Revision, r0+1)
			}
			break
		}
	}
	// Cancel watch 1; requests and watch 2 go on.
	sendReq(t, conn, api.StreamRequest{ID: 1, Op: api.StreamWatchCancel})
	for {
		r := readResponse(t, br)
		if r.ID == 1 && r.Watch == api.StreamWatchEnd {
			if r.Reason != api.ReasonCanceled || r.Revision != r0+1 {
				t.Fatalf("cancel answered %+v", r)
			}
			break
		}
		if r.ID != 1 || r.Watch != api.StreamWatchProgress {
			t.Fatalf("before the cancel's end: %+v", r)
		}
	}
	sendReq(t, conn, api.StreamRequest{ID: 3, Op: api.StreamDelete, Key: []byte("p/b")})
	var sawDelete, sawEvent bool
	for !sawDelete || !sawEvent {
		r := readResponse(t, br)
		switch {
		case r.ID == 3:
			sawDelete = r.Err == nil && r.Deleted == 1
		case r.ID == 2 && r.Watch == api.StreamWatchEvents:
			sawEvent = len(r.Events) == 1 && r.Events[0].Type == api.EventDelete && r.Revision == r0+2
			if !sawEvent {
				t.Fatalf("watch 2 delete frame %+v", r)
			}
		default:
			t.Fatalf("unexpected frame after cancel: %+v", r)
		}
	}
}

// TestStreamWatchRefusals: bad watches are 400s for their id, a compacted start is a
// ResourceExpired end with the compact revision, the per-connection limit is a 429
// that names it, and none of them changes anything or ends the connection.
func TestStreamWatchRefusals(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxStreamWatches = 2 })
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		ts.put(k, "v")
	}
	ts.doJSON(http.MethodPost, api.PathCompact, []byte(`{"revision":4}`), http.StatusOK, nil)
	before := ts.store.FSM().Revision()
	conn, br := rawStream(t, ts)
	bad := [][]byte{
		{1, byte(api.StreamWatch), 0x40, 1, 'k', 0, 0},            // unknown flag
		{2, byte(api.StreamWatch), 0, 1, 'k', 0},                  // no progress_ms
		{3, byte(api.StreamWatchCancel), api.StreamFlagPrefix, 0}, // cancel with a flag
		{4, byte(api.StreamWatch), 0, 0, 0, 0},                    // empty key without prefix
		{5, byte(api.StreamWatch), 0, 1, 'k', 0, 5},               // progress 5ms: below 100ms
		{6, byte(api.StreamWatch), 0, 1, 0xff, 0, 0},              // key not UTF-8
	}
	for _, b := range bad {
		conn.Write(frame(b))
		r := readResponse(t, br)
		if r.ID != uint64(b[0]) || r.Err == nil || r.Err.Code != http.StatusBadRequest {
			t.Fatalf("frame %v answered %+v (err %+v), want 400 for id %d", b, r, r.Err, b[0])
		}
	}
	sendReq(t, conn, api.StreamRequest{ID: 7, Op: api.StreamWatch, Key: []byte("k"), Prefix: true, Revision: 3})
	if r := readResponse(t, br); r.ID != 7 || r.Watch != api.StreamWatchEnd || r.Reason != api.ReasonResourceExpired ||
		r.CompactRevision != 4 || r.Revision != 2 {
		t.Fatalf("compacted start answered %+v (err %+v)", r, r.Err)
	}
	for id := uint64(8); id <= 9; id++ {
		sendReq(t, conn, api.StreamRequest{ID: id, Op: api.StreamWatch, Key: []byte("k"), Prefix: true})
		if r := readResponse(t, br); r.ID != id || r.Watch != api.StreamWatchCreated || r.Err != nil {
			t.Fatalf("watch %d answered %+v (err %+v)", id, r, r.Err)
		}
	}
	sendReq(t, conn, api.StreamRequest{ID: 9, Op: api.StreamWatch, Key: []byte("x")})
	if r := readResponse(t, br); r.ID != 9 || r.Err == nil || r.Err.Code != http.StatusBadRequest {
		t.Fatalf("watch with an id in use answered %+v (err %+v)", r, r.Err)
	}
	sendReq(t, conn, api.StreamRequest{ID: 10, Op: api.StreamWatch, Key: []byte("x")})
	r := readResponse(t, br)
	if r.ID != 10 || r.Err == nil || r.Err.Code != http.StatusTooManyRequests || r.Err.Reason != api.ReasonTooManyWatches {
		t.Fatalf("third watch on a connection limited to 2 answered %+v (err %+v)", r, r.Err)
	}
	if got := ts.store.FSM().Revision(); got != before {
		t.Fatalf("revision moved %d → %d", before, got)
	}
	if n := ts.srv.Watches(); n != 2 {
		t.Fatalf("node counts %d watches, want 2", n)
	}
	// Closing the connection ends its watches.
	conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for ts.srv.Watches() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches still served after the connection closed", ts.srv.Watches())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStreamWatchIdleHoldsNoGoroutine: 1,000 live watches on one connection are
// served by the connection's pump, not a goroutine each; a write reaches every one.
func TestStreamWatchIdleHoldsNoGoroutine(t *testing.T) {
	ts := newTestServer(t)
	conn, br := rawStream(t, ts)
	before := runtime.NumGoroutine()
	const n = 1000
	for id := uint64(1); id <= n; id++ {
		sendReq(t, conn, api.StreamRequest{ID: id, Op: api.StreamWatch, Key: []byte("g/"), Prefix: true})
	}
	for i := 0; i < n; i++ {
		if r := readResponse(t, br); r.Watch != api.StreamWatchCreated || r.Err != nil {
			t.Fatalf("answer %d: %+v (err %+v)", i, r, r.Err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine()-before > 20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines more with %d idle watches", runtime.NumGoroutine()-before, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rev := ts.put("g/k", "v")
	seen := map[uint64]bool{}
	for len(seen) < n {
		r := readResponse(t, br)
		if r.Watch != api.StreamWatchEvents || r.Revision != rev || seen[r.ID] {
			t.Fatalf("frame %+v", r)
		}
		seen[r.ID] = true
	}
}

// BenchmarkStreamWatchIdle10k: the server's memory per idle stream watch (heap and
// goroutine stacks after a GC, 10,000 watches on one connection, each created and
// live). Run with -benchtime 1x.
func BenchmarkStreamWatchIdle10k(b *testing.B) {
	for range b.N {
		ts := newTestServer(b)
		conn, br := rawStream(b, ts)
		conn.SetDeadline(time.Now().Add(time.Minute))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		const n = 10000
		for id := uint64(1); id <= n; id++ {
			conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: id, Op: api.StreamWatch, Key: []byte("idle/"),
				Prefix: true, Progress: 5 * time.Second}))
		}
		for i := 0; i < n; i++ {
			if r := readResponse(b, br); r.Watch != api.StreamWatchCreated || r.Err != nil {
				b.Fatalf("answer %d: %+v", i, r)
			}
		}
		time.Sleep(100 * time.Millisecond) // starting goroutines exit
		runtime.GC()
		runtime.ReadMemStats(&after)
		used := func(m *runtime.MemStats) float64 { return float64(m.HeapAlloc + m.StackInuse) }
		b.ReportMetric((used(&after)-used(&before))/n, "B/watch")
		conn.Close()
	}
}

// TestStreamWatchSharedFrames: on a connection whose upgrade offered shared events
// frames, a revision that reaches several watches is one frame naming them all, and a
// watch replaying from the past still gets its revisions in order, none twice; on a
// connection that did not offer them (an older client), every watch gets its own
// frames.
func TestStreamWatchSharedFrames(t *testing.T) {
	ts := newTestServer(t)
	r0 := ts.put("s/a", "0")
	for _, shared := range []bool{true, false} {
		header := ""
		if shared {
			header = api.HeaderStreamFeatures + ": " + api.StreamFeatureSharedEvents + "\r\n"
		}
		conn, br := rawStreamWith(t, ts, header)
		// Watches 1-3 from now; watch 4 from r0, so it replays r0 first.
		for id := uint64(1); id <= 4; id++ {
			req := api.StreamRequest{ID: id, Op: api.StreamWatch, Key: []byte("s/"), Prefix: true}
			if id == 4 {
				req.Revision = r0
			}
			sendReq(t, conn, req)
		}
		for created := 0; created < 4; {
			if r := readResponse(t, br); r.Err != nil || r.Watch != api.StreamWatchCreated {
				t.Fatalf("shared=%v: want created, got %+v (err %+v)", shared, r, r.Err)
			}
			created++
		}
		got := map[uint64][]int64{}
		frames, sharedFrames := 0, 0
		// readUntil reads events frames until every watch has its want.
		readUntil := func(want map[uint64][]int64) {
			done := func() bool {
				for id, w := range want {
					if len(got[id]) < len(w) {
						return false
					}
				}
				return true
			}
			for !done() {
				r := readResponse(t, br)
				if r.Err != nil || r.Watch != api.StreamWatchEvents {
					t.Fatalf("shared=%v: want events, got %+v (err %+v)", shared, r, r.Err)
				}
				frames++
				if len(r.Shared) > 0 {
					sharedFrames++
				}
				for _, id := range append([]uint64{r.ID}, r.Shared...) {
					got[id] = append(got[id], r.Revision)
				}
			}
		}
		// One revision first, read by all four: a watch whose start was still under
		// way at a write replays it from history, in a frame of its own.
		revs := []int64{ts.put("s/a", "w")}
		want := map[uint64][]int64{1: revs, 2: revs, 3: revs}
		for rev := r0; rev <= revs[0]; rev++ {
			want[4] = append(want[4], rev)
		}
		readUntil(want)
		frames, sharedFrames = 0, 0
		for i := range 3 {
			revs = append(revs, ts.put("s/a", string(rune('1'+i))))
		}
		// Watch 4 gets every revision of the prefix from r0 (only this test writes).
		want = map[uint64][]int64{1: revs, 2: revs, 3: revs}
		for rev := r0; rev <= revs[len(revs)-1]; rev++ {
			want[4] = append(want[4], rev)
		}
		readUntil(want)
		for id, w := range want {
			if !slices.Equal(got[id], w) {
				t.Errorf("shared=%v: watch %d got revisions %v, want %v", shared, id, got[id], w)
			}
		}
		if !shared && sharedFrames > 0 {
			t.Errorf("a connection that did not offer shared frames got %d", sharedFrames)
		}
		if shared && sharedFrames == 0 {
			t.Errorf("shared frames offered: %d frames for 3 live revisions to 4 watches, none shared", frames)
		}
		conn.Close()
	}
}

// TestStreamWatchRequireLeader: a watch that requires a leader ends with reason
// NoLeader at its last revision within a tick of the node losing leader contact, and
// a new one is refused with 503 NoLeader; a watch without the flag goes on.
func TestStreamWatchRequireLeader(t *testing.T) {
	store := &leaderlessStore{LocalStore: kvtest.New()}
	ts := newTestServerWith(t, store)
	ts.put("rl/a", "0")
	conn, br := rawStream(t, ts)
	sendReq(t, conn, api.StreamRequest{ID: 1, Op: api.StreamWatch, Key: []byte("rl/"), Prefix: true, RequireLeader: true})
	sendReq(t, conn, api.StreamRequest{ID: 2, Op: api.StreamWatch, Key: []byte("rl/"), Prefix: true})
	for created := 0; created < 2; created++ {
		if r := readResponse(t, br); r.Err != nil || r.Watch != api.StreamWatchCreated {
			t.Fatalf("want created, got %+v (err %+v)", r, r.Err)
		}
	}
	r1 := ts.put("rl/a", "1")
	for got := 0; got < 2; got++ {
		if r := readResponse(t, br); r.Watch != api.StreamWatchEvents || r.Revision != r1 {
			t.Fatalf("want the events of %d, got %+v", r1, r)
		}
	}
	store.Cut()
	start := time.Now()
	r := readResponse(t, br)
	if r.ID != 1 || r.Watch != api.StreamWatchEnd || r.Reason != api.ReasonNoLeader || r.Revision != r1 {
		t.Fatalf("after the node lost its leader: %+v, want watch 1's end, reason NoLeader, at %d", r, r1)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("the watch ended %v after the node lost its leader", waited)
	}
	sendReq(t, conn, api.StreamRequest{ID: 3, Op: api.StreamWatch, Key: []byte("rl/"), Prefix: true, RequireLeader: true})
	if r := readResponse(t, br); r.ID != 3 || r.Err == nil || r.Err.Code != http.StatusServiceUnavailable || r.Err.Reason != api.ReasonNoLeader {
		t.Fatalf("a watch requiring a leader on a node without one: %+v (err %+v), want 503 NoLeader", r, r.Err)
	}
	r2 := ts.put("rl/a", "2") // the local store still applies: watch 2 goes on
	if r := readResponse(t, br); r.ID != 2 || r.Watch != api.StreamWatchEvents || r.Revision != r2 {
		t.Fatalf("watch 2 after the loss: %+v, want its events at %d", r, r2)
	}
}
