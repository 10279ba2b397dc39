package httpapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
)

func TestPutGetDelete(t *testing.T) {
	ts := newTestServer(t)
	rev1 := ts.put("app/a", "one")
	rev2 := ts.put("app/a", "two")
	if rev2 != rev1+1 {
		t.Fatalf("second put revision = %d, want %d", rev2, rev1+1)
	}
	var got api.GetResponse
	ts.doJSON(http.MethodGet, "/v1/kv/app/a", nil, http.StatusOK, &got)
	want := api.GetResponse{KV: api.KV{Key: "app/a", Value: []byte("two"), CreateRevision: rev1,
		ModRevision: rev2, Version: 2}, Revision: rev2}
	if got.Key != want.Key || string(got.Value) != "two" || got.CreateRevision != want.CreateRevision ||
		got.ModRevision != want.ModRevision || got.Version != want.Version || got.Revision != want.Revision {
		t.Fatalf("get = %+v, want %+v", got, want)
	}

	code, body, h := ts.do(http.MethodGet, "/v1/kv/app/a?raw=true", nil)
	if code != http.StatusOK || string(body) != "two" {
		t.Fatalf("raw get = %d %q, want 200 \"two\"", code, body)
	}
	for name, want := range map[string]int64{api.HeaderRevision: rev2, api.HeaderCreateRevision: rev1,
		api.HeaderModRevision: rev2, api.HeaderVersion: 2} {
		if got := h.Get(name); got != strconv.FormatInt(want, 10) {
			t.Errorf("raw get header %s = %q, want %d", name, got, want)
		}
	}

	var del api.DeleteResponse
	ts.doJSON(http.MethodDelete, "/v1/kv/app/a", nil, http.StatusOK, &del)
	if del.Deleted != 1 || del.Revision != rev2+1 {
		t.Fatalf("delete = %+v, want deleted 1 at %d", del, rev2+1)
	}
	ts.expectError(http.MethodGet, "/v1/kv/app/a", nil, http.StatusNotFound, api.ReasonNotFound)
	ts.expectError(http.MethodGet, "/v1/kv/app/a?raw=true", nil, http.StatusNotFound, api.ReasonNotFound)
	ts.doJSON(http.MethodDelete, "/v1/kv/app/a", nil, http.StatusOK, &del)
	if del.Deleted != 0 || del.Revision != rev2+1 {
		t.Fatalf("delete of absent key = %+v, want deleted 0 at unchanged revision %d", del, rev2+1)
	}
	// Older revisions stay readable until compacted.
	ts.doJSON(http.MethodGet, "/v1/kv/app/a?revision="+strconv.FormatInt(rev1, 10), nil, http.StatusOK, &got)
	if string(got.Value) != "one" || got.Revision != rev1 {
		t.Fatalf("get at %d = %q at %d, want \"one\"", rev1, got.Value, got.Revision)
	}
	ts.doJSON(http.MethodGet, "/v1/kv/app/a?revision="+strconv.FormatInt(rev2, 10)+"&consistency=serializable",
		nil, http.StatusOK, &got)
	if string(got.Value) != "two" {
		t.Fatalf("serializable get at %d = %q, want \"two\"", rev2, got.Value)
	}
}

func TestEmptyValue(t *testing.T) {
	ts := newTestServer(t)
	ts.put("empty", "")
	code, body, _ := ts.do(http.MethodGet, "/v1/kv/empty", nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"value":""`) {
		t.Fatalf("get empty value = %d %s, want 200 with \"value\":\"\"", code, body)
	}
}

// TestCAS: prev_revision guards. The fixture, by revision:
//
//	r1: put k=v1   (create)
//	r2: put k=v2   (CAS on r1)
//	    put k=x    (CAS on r1: stale → 409, nothing written)
//	    put k=x    (create only: exists → 409)
//	    put n=x    (CAS on 5: absent → 409)
//	r3: put n=new  (create only)
func TestCAS(t *testing.T) {
	ts := newTestServer(t)
	base := ts.revision()
	r1 := base + 1
	tests := []struct {
		method, path, body string
		code               int
		rev                int64 // the revision the store must be at afterwards
	}{
		{http.MethodPut, "/v1/kv/k?prev_revision=0", "v1", http.StatusOK, r1},
		{http.MethodPut, "/v1/kv/k?prev_revision=" + strconv.FormatInt(r1, 10), "v2", http.StatusOK, r1 + 1},
		{http.MethodPut, "/v1/kv/k?prev_revision=" + strconv.FormatInt(r1, 10), "x", http.StatusConflict, r1 + 1},
		{http.MethodPut, "/v1/kv/k?prev_revision=0", "x", http.StatusConflict, r1 + 1},
		{http.MethodPut, "/v1/kv/n?prev_revision=5", "x", http.StatusConflict, r1 + 1},
		{http.MethodPut, "/v1/kv/n?prev_revision=0", "new", http.StatusOK, r1 + 2},
		{http.MethodDelete, "/v1/kv/k?prev_revision=" + strconv.FormatInt(r1, 10), "", http.StatusConflict, r1 + 2},
		{http.MethodDelete, "/v1/kv/k?prev_revision=" + strconv.FormatInt(r1+1, 10), "", http.StatusOK, r1 + 3},
	}
	for i, tt := range tests {
		code, body, _ := ts.do(tt.method, tt.path, []byte(tt.body))
		if code != tt.code {
			t.Fatalf("#%d: %s %s = %d %s, want %d", i, tt.method, tt.path, code, body, tt.code)
		}
		if code == http.StatusConflict && !strings.Contains(string(body), `"reason":"Conflict"`) {
			t.Errorf("#%d: 409 body %s lacks reason Conflict", i, body)
		}
		if got := ts.revision(); got != tt.rev {
			t.Fatalf("#%d: revision = %d, want %d", i, got, tt.rev)
		}
	}
	var got api.GetResponse
	ts.doJSON(http.MethodGet, "/v1/kv/n", nil, http.StatusOK, &got)
	if string(got.Value) != "new" {
		t.Fatalf("n = %q, want \"new\" (conflicting writes must write nothing)", got.Value)
	}
}

func TestDeletePrefix(t *testing.T) {
	ts := newTestServer(t)
	for _, k := range []string{"a/1", "a/2", "a/3/x", "a0", "b"} {
		ts.put(k, "v")
	}
	var del api.DeleteResponse
	ts.doJSON(http.MethodDelete, "/v1/kv/a/?prefix=true", nil, http.StatusOK, &del)
	if del.Deleted != 3 {
		t.Fatalf("deleted = %d, want 3", del.Deleted)
	}
	for _, k := range []string{"a0", "b"} {
		ts.doJSON(http.MethodGet, "/v1/kv/"+k, nil, http.StatusOK, nil)
	}
	ts.expectError(http.MethodGet, "/v1/kv/a/1", nil, http.StatusNotFound, api.ReasonNotFound)
}

// TestKeyEscaping: any UTF-8 key round-trips when "/" and "." are escaped, as
// kv/client does; plain slashes work too.
func TestKeyEscaping(t *testing.T) {
	ts := newTestServer(t)
	keys := []string{"a/b/c", "a//b", ".", "..", "x/../y", "sp ace", "q?x=1", "pct%20", "héllo/世界", "#frag", "end/"}
	for _, k := range keys {
		path := api.PathKV + strings.ReplaceAll(url.PathEscape(k), ".", "%2E")
		ts.doJSON(http.MethodPut, path, []byte("v:"+k), http.StatusOK, nil)
		var got api.GetResponse
		ts.doJSON(http.MethodGet, path, nil, http.StatusOK, &got)
		if got.Key != k || string(got.Value) != "v:"+k {
			t.Errorf("key %q: got key %q value %q", k, got.Key, got.Value)
		}
	}
	var got api.GetResponse
	ts.doJSON(http.MethodGet, "/v1/kv/a/b/c", nil, http.StatusOK, &got)
	if got.Key != "a/b/c" {
		t.Fatalf("unescaped path: key %q, want a/b/c", got.Key)
	}
}

// TestBadRequests: every bad input is a JSON error with the right status, and changes
// nothing.
func TestBadRequests(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxValueBytes = 1024 })
	ts.put("k", "v")
	long := strings.Repeat("x", 4097)
	tests := []struct {
		method, path, body string
		code               int
		reason             string
	}{
		{http.MethodPut, "/v1/kv/", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/" + long, "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/%FF%FE", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/k?prev_revision=-1", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/k?prev_revision=x", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/k?prev_revision=", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/k?prev_revision=1&prev_revision=2", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/k?prefix=true", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/k?a=%zz", "v", 400, api.ReasonBadRequest},
		{http.MethodPut, "/v1/kv/k", strings.Repeat("v", 1025), 413, api.ReasonTooLarge},
		{http.MethodGet, "/v1/kv/", "", 400, api.ReasonBadRequest},
		{http.MethodGet, "/v1/kv/k?revision=-1", "", 400, api.ReasonBadRequest},
		{http.MethodGet, "/v1/kv/k?revision=99999", "", 400, api.ReasonFutureRevision},
		{http.MethodGet, "/v1/kv/k?consistency=strong", "", 400, api.ReasonBadRequest},
		{http.MethodGet, "/v1/kv/k?raw=maybe", "", 400, api.ReasonBadRequest},
		{http.MethodGet, "/v1/kv/k?limit=5", "", 400, api.ReasonBadRequest},
		{http.MethodGet, "/v1/kv/k?prefix=true", "", 400, api.ReasonBadRequest},
		{http.MethodGet, "/v1/kv/missing", "", 404, api.ReasonNotFound},
		{http.MethodDelete, "/v1/kv/", "", 400, api.ReasonBadRequest},
		{http.MethodDelete, "/v1/kv/k?prev_revision=0", "", 400, api.ReasonBadRequest},
		{http.MethodDelete, "/v1/kv/k?prefix=true&prev_revision=3", "", 400, api.ReasonBadRequest},
		{http.MethodDelete, "/v1/kv/k?prefix=yes", "", 400, api.ReasonBadRequest},
		{http.MethodPost, "/v1/kv/k", "", 405, api.ReasonMethodNotAllowed},
		{http.MethodGet, "/v1/txn", "", 405, api.ReasonMethodNotAllowed},
		{http.MethodPut, "/v1/status", "", 405, api.ReasonMethodNotAllowed},
		{http.MethodGet, "/v2/kv/k", "", 404, api.ReasonNotFound},
		{http.MethodGet, "/", "", 404, api.ReasonNotFound},
	}
	for i, tt := range tests {
		before := ts.revision()
		e := ts.expectError(tt.method, tt.path, []byte(tt.body), tt.code, tt.reason)
		if e.Message == "" {
			t.Errorf("#%d: %s %s: empty message", i, tt.method, tt.path)
		}
		if got := ts.revision(); got != before {
			t.Errorf("#%d: %s %s changed the revision %d → %d", i, tt.method, tt.path, before, got)
		}
	}
	var got api.GetResponse
	ts.doJSON(http.MethodGet, "/v1/kv/k", nil, http.StatusOK, &got)
	if string(got.Value) != "v" {
		t.Fatalf("k = %q after bad requests, want \"v\"", got.Value)
	}
}

func TestMethodNotAllowedAllowHeader(t *testing.T) {
	ts := newTestServer(t)
	code, _, h := ts.do(http.MethodPatch, "/v1/kv/k", nil)
	if code != http.StatusMethodNotAllowed || h.Get("Allow") != "DELETE, GET, HEAD, PUT" {
		t.Fatalf("PATCH = %d Allow %q, want 405 \"DELETE, GET, HEAD, PUT\"", code, h.Get("Allow"))
	}
}

// TestStoreFailures: replication errors map to 503/504 with Retry-After, and a write
// whose outcome is unknown says so.
func TestStoreFailures(t *testing.T) {
	ts := newTestServer(t)
	tests := []struct {
		err            error
		method         string
		code           int
		reason         string
		unknownOutcome bool
	}{
		{raft.ErrNoLeader, http.MethodPut, 503, api.ReasonNoLeader, false},
		{raft.ErrNotLeader, http.MethodPut, 503, api.ReasonUnavailable, false},
		{raft.ErrShutdown, http.MethodPut, 503, api.ReasonShuttingDown, true},
		{raft.ErrTimeout, http.MethodPut, 504, api.ReasonTimeout, true},
		{raft.ErrNoLeader, http.MethodGet, 503, api.ReasonNoLeader, false},
		{raft.ErrTimeout, http.MethodGet, 504, api.ReasonTimeout, false},
	}
	ts.put("k", "v")
	for i, tt := range tests {
		ts.store.FailNext(1, tt.err)
		code, body, h := ts.do(tt.method, "/v1/kv/k", []byte("x"))
		if code != tt.code || !strings.Contains(string(body), `"reason":"`+tt.reason+`"`) {
			t.Errorf("#%d: %v on %s = %d %s, want %d %s", i, tt.err, tt.method, code, body, tt.code, tt.reason)
		}
		if h.Get("Retry-After") != "1" {
			t.Errorf("#%d: Retry-After = %q, want 1", i, h.Get("Retry-After"))
		}
		if got := strings.Contains(string(body), "outcome of the write is unknown"); got != tt.unknownOutcome {
			t.Errorf("#%d: message %s: says outcome unknown = %v, want %v", i, body, got, tt.unknownOutcome)
		}
	}
}
