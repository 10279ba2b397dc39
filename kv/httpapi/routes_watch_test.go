package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// watchStream opens GET path and returns a reader of its lines.
func (ts *testServer) watch(ctx context.Context, path string) (*http.Response, func() api.WatchEvent) {
	ts.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return resp, func() api.WatchEvent {
		ts.t.Helper()
		if !sc.Scan() {
			ts.t.Fatalf("watch stream ended: %v", sc.Err())
		}
		var ev api.WatchEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			ts.t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		return ev
	}
}

// History: rev 1 put w/a=1, rev 2 put w/b=1 and x=1 (txn), rev 3 delete w/a; the watch
// starts at 1 (replay) and sees rev 4 live.
func TestWatchHTTPReplayLivePrevKV(t *testing.T) {
	ts := newTestServer(t)
	base := ts.store.FSM().Revision()
	ts.put("w/a", "1")
	ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte("w/b"), Value: []byte("1")}, {Type: fsm.OpPut, Key: []byte("x"), Value: []byte("1")}}}})
	ts.doJSON(http.MethodDelete, "/v1/kv/w/a", nil, http.StatusOK, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, next := ts.watch(ctx, "/v1/watch/w/?prefix=true&prev_kv=true&start_revision="+strconv.FormatInt(base+1, 10))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.ContentTypeWatch {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ts.put("w/b", "2")
	want := []struct {
		typ, key, val, prev string
		rev                 int64
	}{
		{"PUT", "w/a", "1", "", base + 1},
		{"PUT", "w/b", "1", "", base + 2},
		{"DELETE", "w/a", "", "1", base + 3},
		{"PUT", "w/b", "2", "1", base + 4},
	}
	for i, w := range want {
		ev := next()
		prev := ""
		if ev.PrevKV != nil {
			prev = string(ev.PrevKV.Value)
		}
		if ev.Type != w.typ || ev.KV.Key != w.key || string(ev.KV.Value) != w.val || prev != w.prev ||
			ev.Revision != w.rev || ev.KV.ModRevision != w.rev {
			t.Fatalf("#%d: %+v (kv %+v), want %+v", i, ev, ev.KV, w)
		}
	}
}

func TestWatchHTTPProgressAndFromNow(t *testing.T) {
	ts := newTestServer(t)
	ts.put("other", "1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, next := ts.watch(ctx, "/v1/watch/k?progress=100ms")
	defer resp.Body.Close()
	rev := ts.put("other", "2")
	for {
		ev := next()
		if ev.Type != api.EventProgress {
			t.Fatalf("event %+v on an idle watch", ev)
		}
		if ev.Revision >= rev {
			break
		}
	}
	ts.put("k", "v")
	if ev := next(); ev.Type != api.EventPut || ev.KV.Key != "k" || ev.Revision != rev+1 {
		t.Fatalf("event %+v, want put k at %d", ev, rev+1)
	}
}

// A watch that is not read fills its buffer and ends with an END SlowWatcher line
// naming the last revision sent; the apply path never waited for it.
func TestWatchHTTPSlowWatcher(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.WatchBuffer = 4 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A watcher registered directly, never read, is the slow one; the HTTP stream
	// below is read, and reports the END its own buffer produces when not read.
	resp, next := ts.watch(ctx, "/v1/watch/s/?prefix=true")
	defer resp.Body.Close()
	start := ts.store.FSM().Revision() + 1
	// Big values fill the socket buffers, then the watch buffer.
	val := make([]byte, 64<<10)
	for i := 0; i < 200; i++ {
		ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
			Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte("s/" + strconv.Itoa(i)), Value: val}}}})
	}
	last := start - 1
	for {
		ev := next()
		if ev.Type == api.EventEnd {
			if ev.Reason != api.ReasonSlowWatcher || ev.Revision != last {
				t.Fatalf("end %+v, want SlowWatcher at last revision %d", ev, last)
			}
			return
		}
		if ev.Revision != last+1 {
			t.Fatalf("event at %d after %d", ev.Revision, last)
		}
		last = ev.Revision
	}
}

func TestWatchHTTPBadInputAndLimits(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxWatches = 1 })
	for i := 0; i < 5; i++ {
		ts.put("c", strconv.Itoa(i))
	}
	ts.doJSON(http.MethodPost, api.PathCompact, []byte(`{"revision":4}`), http.StatusOK, nil)
	for _, c := range []struct {
		path   string
		code   int
		reason string
	}{
		{"/v1/watch/", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/k?start_revision=abc", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/k?start_revision=-1", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/k?progress=1ns", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/k?progress=soon", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/k?prefix=maybe", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/k?bogus=1", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/%FF", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/k?consistency=eventual", http.StatusBadRequest, api.ReasonBadRequest},
		{"/v1/watch/c?start_revision=3", http.StatusGone, api.ReasonResourceExpired},
	} {
		e := ts.expectError(http.MethodGet, c.path, nil, c.code, c.reason)
		if c.code == http.StatusGone && e.CompactRevision != 4 {
			t.Errorf("%s: compact_revision = %d, want 4", c.path, e.CompactRevision)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, _ := ts.watch(ctx, "/v1/watch/c?start_revision=5")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch from 5: %d", resp.StatusCode)
	}
	ts.expectError(http.MethodGet, "/v1/watch/d", nil, http.StatusTooManyRequests, api.ReasonTooManyWatches)
	if rev := ts.store.FSM().Revision(); rev != 5 {
		t.Fatalf("revision %d after bad watches, want 5", rev)
	}
}

// Shutdown ends open watches instead of waiting for them forever.
func TestWatchHTTPShutdownEndsWatches(t *testing.T) {
	ts := newTestServer(t)
	resp, _ := ts.watch(context.Background(), "/v1/watch/k")
	defer resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestWatchHTTPRequireLeader: an HTTP watch that requires a leader (the parameter, or
// the header the Go client sends) ends with an END line of reason NoLeader at its
// last revision once the node loses leader contact, and a new one is refused with 503
// NoLeader; a watch without it goes on; a bad header value is a 400.
func TestWatchHTTPRequireLeader(t *testing.T) {
	store := &leaderlessStore{LocalStore: kvtest.New()}
	ts := newTestServerWith(t, store)
	ts.put("rl/a", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(query string, header bool) (*http.Response, func() api.WatchEvent) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+"/v1/watch/rl/?prefix=true"+query, nil)
		if header {
			req.Header.Set(api.HeaderRequireLeader, "true")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		sc := bufio.NewScanner(resp.Body)
		return resp, func() api.WatchEvent {
			t.Helper()
			if !sc.Scan() {
				t.Fatalf("watch stream ended: %v", sc.Err())
			}
			var ev api.WatchEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatal(err)
			}
			return ev
		}
	}
	_, byParam := open("&require_leader=true", false)
	_, byHeader := open("", true)
	_, plain := open("", false)
	r1 := ts.put("rl/a", "1")
	for _, next := range []func() api.WatchEvent{byParam, byHeader, plain} {
		if ev := next(); ev.Type != api.EventPut || ev.Revision != r1 {
			t.Fatalf("want the put at %d, got %+v", r1, ev)
		}
	}
	store.Cut()
	for name, next := range map[string]func() api.WatchEvent{"param": byParam, "header": byHeader} {
		if ev := next(); ev.Type != api.EventEnd || ev.Reason != api.ReasonNoLeader || ev.Revision != r1 {
			t.Fatalf("%s: after the node lost its leader: %+v, want END NoLeader at %d", name, ev, r1)
		}
	}
	r2 := ts.put("rl/a", "2") // the local store still applies: the plain watch goes on
	if ev := plain(); ev.Type != api.EventPut || ev.Revision != r2 {
		t.Fatalf("plain watch after the loss: %+v, want the put at %d", ev, r2)
	}
	ts.expectError(http.MethodGet, "/v1/watch/rl/?prefix=true&require_leader=true", nil,
		http.StatusServiceUnavailable, api.ReasonNoLeader)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+"/v1/watch/rl/?prefix=true", nil)
	req.Header.Set(api.HeaderRequireLeader, "maybe")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	if json.NewDecoder(resp.Body).Decode(&e); resp.StatusCode != http.StatusBadRequest || e.Reason != api.ReasonBadRequest {
		t.Fatalf("header value maybe: %d %+v, want 400 BadRequest", resp.StatusCode, e)
	}
}
