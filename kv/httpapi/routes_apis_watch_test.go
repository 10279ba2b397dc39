package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// typedWatch opens a typed watch and returns a reader of its events.
func (ts *testServer) typedWatch(ctx context.Context, path string) (*http.Response, func() typedEvent) {
	ts.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.ContentTypeWatch {
		ts.t.Fatalf("GET %s: status %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	return resp, func() typedEvent {
		ts.t.Helper()
		if !sc.Scan() {
			ts.t.Fatalf("typed watch ended: %v", sc.Err())
		}
		var ev typedEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			ts.t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		return ev
	}
}

// putWidget writes widget name in v2 with spec.replicas, expecting code, and returns
// the write's revision.
func (ts *testServer) putWidget(name string, replicas, code int) int64 {
	var out map[string]any
	ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/"+name,
		objJSON(map[string]any{"spec": map[string]any{"replicas": replicas}}), code, &out)
	return int64(out["metadata"].(map[string]any)["revision"].(float64))
}

// typedObj is what a test reads of an event's object.
type typedObj struct {
	typ, apiVersion, name string
	size                  float64 // v1's spec.size
	rev                   int64
	reason                string // ERROR only
}

func readTyped(ev typedEvent) typedObj {
	o, _ := ev.Object.(map[string]any)
	meta, _ := o["metadata"].(map[string]any)
	spec, _ := o["spec"].(map[string]any)
	out := typedObj{typ: ev.Type}
	out.apiVersion, _ = o["apiVersion"].(string)
	out.name, _ = meta["name"].(string)
	out.size, _ = spec["size"].(float64)
	rev, _ := meta["revision"].(float64)
	out.rev = int64(rev)
	if ev.Type == typedError {
		det, _ := o["details"].(map[string]any)
		out.name, _ = det["name"].(string)
		rev, _ := det["revision"].(float64)
		out.rev = int64(rev)
		out.reason, _ = o["reason"].(string)
	}
	return out
}

// The history, with widgets stored in v2 and watched in v1 (spec.replicas shown as
// spec.size):
//
//	r1: put w1 (replicas 1)     <- exists when the watch starts: ADDED first
//	r2: put w2 (replicas 2)     ADDED
//	r3: put w1 (replicas 3)     MODIFIED
//	r4: delete w2               DELETED, w2 as it was (size 2) at r4
//	r5: w3 stored in v9         ERROR naming w3: this node cannot decode v9
//	r6: put w4 (replicas 4)     ADDED: the stream goes on
//
// A second watch from resourceVersion=r3 replays r4.. from history.
func TestTypedWatch(t *testing.T) {
	ts := newResourceServer(t)
	put := ts.putWidget
	r1 := put("w1", 1, http.StatusCreated)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, next := ts.typedWatch(ctx, "/apis/apps/v1/widgets?watch=true")
	defer resp.Body.Close()
	r2 := put("w2", 2, http.StatusCreated)
	r3 := put("w1", 3, http.StatusOK)
	ts.doJSON(http.MethodDelete, "/apis/apps/v2/widgets/w2", nil, http.StatusOK, nil)
	ts.storeRaw(t, "w3", "v9", `{"spec":{}}`)
	r6 := put("w4", 4, http.StatusCreated)
	want := []typedObj{
		{typedAdded, "apps/v1", "w1", 1, r1, ""},
		{typedAdded, "apps/v1", "w2", 2, r2, ""},
		{typedModified, "apps/v1", "w1", 3, r3, ""},
		{typedDeleted, "apps/v1", "w2", 2, r3 + 1, ""},
		{typedError, "", "w3", 0, r3 + 2, api.ReasonUnavailable},
		{typedAdded, "apps/v1", "w4", 4, r6, ""},
	}
	check := func(label string, next func() typedEvent, want []typedObj) {
		t.Helper()
		for i, w := range want {
			if got := readTyped(next()); got != w {
				t.Fatalf("%s #%d: %+v, want %+v", label, i, got, w)
			}
		}
	}
	check("from now", next, want)

	resp2, next2 := ts.typedWatch(ctx, fmt.Sprintf("/apis/apps/v1/widgets?watch=true&resourceVersion=%d", r3))
	defer resp2.Body.Close()
	check("from r3", next2, want[3:])
}

func TestTypedWatchBookmarks(t *testing.T) {
	ts := newResourceServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, next := ts.typedWatch(ctx, "/apis/apps/v2/widgets?watch=1&allowWatchBookmarks=true&progress=100ms")
	defer resp.Body.Close()
	ev := next()
	if got := readTyped(ev); got.typ != typedBookmark || got.apiVersion != "apps/v2" || got.rev != ts.store.FSM().Revision() {
		t.Fatalf("bookmark %+v, want one at revision %d", got, ts.store.FSM().Revision())
	}
}

// TestTypedWatchBadInput: a malformed watch is a clear 4xx; list parameters and watch
// parameters do not mix.
func TestTypedWatchBadInput(t *testing.T) {
	ts := newResourceServer(t)
	for i, tc := range []struct {
		path   string
		code   int
		reason string
	}{
		{"/apis/apps/v1/widgets?watch=maybe", http.StatusBadRequest, api.ReasonBadRequest},
		{"/apis/apps/v1/widgets?watch=true&resourceVersion=-1", http.StatusBadRequest, api.ReasonBadRequest},
		{"/apis/apps/v1/widgets?watch=true&resourceVersion=x", http.StatusBadRequest, api.ReasonBadRequest},
		{"/apis/apps/v1/widgets?watch=true&limit=3", http.StatusBadRequest, api.ReasonBadRequest},
		{"/apis/apps/v1/widgets?watch=true&allowWatchBookmarks=true&progress=1ms", http.StatusBadRequest, api.ReasonBadRequest},
		{"/apis/apps/v1/widgets?watch=true&allowWatchBookmarks=true&progress=0s", http.StatusBadRequest, api.ReasonBadRequest},
		{"/apis/apps/v1/widgets?watch=true&resourceVersion=3&resourceVersionMatch=Exact", http.StatusBadRequest, api.ReasonBadRequest},
		{"/apis/apps/v3/widgets?watch=true", http.StatusNotFound, api.ReasonNotFound},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ts.expectError(http.MethodGet, tc.path, nil, tc.code, tc.reason)
		})
	}
}

// A watch the server ends ends with an ERROR event saying where to resume: 429
// SlowWatcher and 503 Restored at details.revision, 410 ResourceExpired to list again.
func TestTypedWatchEnd(t *testing.T) {
	for i, tc := range []struct {
		err    error
		code   int
		reason string
	}{
		{&fsm.WatchError{Err: fsm.ErrSlowWatcher, LastRevision: 12}, http.StatusTooManyRequests, api.ReasonSlowWatcher},
		{&fsm.WatchError{Err: fsm.ErrWatchRestored, LastRevision: 12}, http.StatusServiceUnavailable, api.ReasonRestored},
		{&fsm.WatchError{Err: fsm.ErrCompacted, LastRevision: 12, CompactRevision: 20}, http.StatusGone, api.ReasonResourceExpired},
	} {
		rec := httptest.NewRecorder()
		ws := &typedWatchStream{watchStream: &watchStream{w: rec, rc: http.NewResponseController(rec), bw: bufio.NewWriter(rec)}, group: "apps", kind: "widgets"}
		ws.enc = json.NewEncoder(ws.bw)
		ws.end(tc.err)
		var ev struct {
			Type   string      `json:"type"`
			Object typedStatus `json:"object"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &ev); err != nil {
			t.Fatalf("#%d: %q: %v", i, rec.Body.String(), err)
		}
		if ev.Type != typedError || ev.Object.Code != tc.code || ev.Object.Reason != tc.reason || ev.Object.Details.Revision != 12 {
			t.Errorf("#%d: %+v, want ERROR %d %s at revision 12", i, ev, tc.code, tc.reason)
		}
	}
}

// TestTypedWatchRequireLeader: a typed watch with require_leader ends with an ERROR
// event of reason NoLeader (503) at the last revision it sent once the node loses
// leader contact (an informer resumes from there through another node), and a new one
// is refused 503 NoLeader; a typed watch without it goes on (as /v1/watch's,
// TestWatchHTTPRequireLeader).
func TestTypedWatchRequireLeader(t *testing.T) {
	store := &leaderlessStore{LocalStore: kvtest.New()}
	ts := withResources(t, newTestServerWith(t, store))
	put := ts.putWidget
	r1 := put("w1", 1, http.StatusCreated)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, leader := ts.typedWatch(ctx, "/apis/apps/v1/widgets?watch=true&require_leader=true")
	defer resp.Body.Close()
	resp2, plain := ts.typedWatch(ctx, "/apis/apps/v1/widgets?watch=true")
	defer resp2.Body.Close()
	r2 := put("w1", 2, http.StatusOK)
	for name, next := range map[string]func() typedEvent{"require_leader": leader, "plain": plain} {
		for _, want := range []typedObj{{typedAdded, "apps/v1", "w1", 1, r1, ""}, {typedModified, "apps/v1", "w1", 2, r2, ""}} {
			if got := readTyped(next()); got != want {
				t.Fatalf("%s: %+v, want %+v", name, got, want)
			}
		}
	}
	store.Cut()
	if got, want := readTyped(leader()), (typedObj{typedError, "", "", 0, r2, api.ReasonNoLeader}); got != want {
		t.Fatalf("require_leader after the node lost its leader: %+v, want %+v", got, want)
	}
	r3 := put("w2", 3, http.StatusCreated) // the local store still applies: the plain watch goes on
	if got, want := readTyped(plain()), (typedObj{typedAdded, "apps/v1", "w2", 3, r3, ""}); got != want {
		t.Fatalf("plain watch after the loss: %+v, want %+v", got, want)
	}
	ts.expectError(http.MethodGet, "/apis/apps/v1/widgets?watch=true&require_leader=true", nil,
		http.StatusServiceUnavailable, api.ReasonNoLeader)
}
