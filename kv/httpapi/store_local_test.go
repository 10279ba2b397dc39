package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// The kv tests run the real server over real HTTP on 127.0.0.1 against
// kvtest.LocalStore: a real fsm.Store whose commands are applied directly, without
// replication (see kvtest's package comment). Replicated clusters are tested by
// package raft and by the end-to-end tests.

// testServer is one server, its store and a plain HTTP client.
type testServer struct {
	t     testing.TB
	store *kvtest.LocalStore
	core  *kv.Server
	srv   *Server
	url   string
}

// newTestServer starts a server over a fresh LocalStore; opts adjust DefaultConfig.
func newTestServer(t testing.TB, opts ...func(*kv.Config)) *testServer {
	return newTestServerOn(t, kvtest.New(), opts...)
}

func newTestServerOn(t testing.TB, store *kvtest.LocalStore, opts ...func(*kv.Config)) *testServer {
	t.Helper()
	cfg := kv.DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	ts, _ := serveStore(t, store, cfg)
	ts.store = store
	return ts
}

// serveStore serves the HTTP door over a core on store with cfg, through an
// httptest server closed when the test ends (or earlier by the caller).
func serveStore(t testing.TB, store kv.Store, cfg kv.Config) (*testServer, *httptest.Server) {
	t.Helper()
	core, err := kv.NewServer(cfg, store, nil)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	srv := New(core)
	attachTestDoors(srv)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testServer{t: t, core: core, srv: srv, url: hs.URL}, hs
}

// mustJSON is v in JSON.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// do sends one request and returns status, body and headers.
func (ts *testServer) do(method, path string, body []byte) (int, []byte, http.Header) {
	ts.t.Helper()
	return kvtest.Do(ts.t, ts.url, method, path, body)
}

// doJSON sends a request, expects status want and decodes the body into out.
func (ts *testServer) doJSON(method, path string, body []byte, want int, out any) {
	ts.t.Helper()
	kvtest.DoJSON(ts.t, ts.url, method, path, body, want, out)
}

// expectError sends a request and checks it fails with code and reason.
func (ts *testServer) expectError(method, path string, body []byte, code int, reason string) api.Error {
	ts.t.Helper()
	got, b, h := ts.do(method, path, body)
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil {
		ts.t.Fatalf("%s %s = %d %q: not a JSON error: %v", method, path, got, b, err)
	}
	if got != code || e.Code != code || e.Reason != reason {
		ts.t.Fatalf("%s %s = %d {%d %s %q}, want %d %s", method, path, got, e.Code, e.Reason, e.Message, code, reason)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		ts.t.Fatalf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return e
}

func (ts *testServer) put(key, value string) int64 {
	ts.t.Helper()
	var resp api.PutResponse
	ts.doJSON(http.MethodPut, api.PathKV+key, []byte(value), http.StatusOK, &resp)
	return resp.Revision
}

// putMany writes keys fmt.Sprintf(format, i) for i in [0, n) with value "v<i>",
// straight through the store, 128 per transaction.
func (ts *testServer) putMany(format string, n int) { ts.putManyValues(format, n, 0) }

// putManyValues is putMany with values of size bytes when size > 0 (as the scan
// benchmark of bench/ loads them).
func (ts *testServer) putManyValues(format string, n, size int) {
	ts.t.Helper()
	pad := bytes.Repeat([]byte{'x'}, size)
	for i := 0; i < n; {
		txn := &fsm.Txn{}
		for ; i < n && len(txn.Success) < fsm.MaxTxnOps; i++ {
			txn.Success = append(txn.Success, fsm.Op{Type: fsm.OpPut,
				Key: []byte(fmt.Sprintf(format, i)), Value: value(i, pad)})
		}
		res, err := ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
		if err != nil || res.Err != nil {
			ts.t.Fatalf("putMany: %v %v", err, res.Err)
		}
	}
}

func value(i int, pad []byte) []byte {
	if len(pad) > 0 {
		return pad
	}
	return []byte(fmt.Sprintf("v%d", i))
}

// revision is the store's current revision.
func (ts *testServer) revision() int64 { return ts.store.FSM().Revision() }
