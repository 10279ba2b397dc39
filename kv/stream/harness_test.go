package stream_test

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/kv/stream"
)

// The stream door's tests run a real server (the core and its HTTP door, which
// upgrades GET /v1/stream) with this door attached, over real HTTP on 127.0.0.1,
// against kvtest.LocalStore (a real fsm.Store without replication).

// testServer is one server, its store and a plain HTTP client.
type testServer struct {
	t     testing.TB
	store *kvtest.LocalStore
	srv   *kv.Server      // the core
	door  *httpapi.Server // the HTTP door the stream upgrades from
	url   string
}

// newTestServer starts a server over a fresh LocalStore; opts adjust DefaultConfig.
func newTestServer(t testing.TB, opts ...func(*kv.Config)) *testServer {
	t.Helper()
	st := kvtest.New()
	return serveStore(t, st, st, opts...)
}

// serveStore serves store (whose LocalStore is local) with the stream door attached.
func serveStore(t testing.TB, store kv.Store, local *kvtest.LocalStore, opts ...func(*kv.Config)) *testServer {
	t.Helper()
	cfg := kv.DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	core, err := kv.NewServer(cfg, store, nil)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	srv := httpapi.New(core)
	stream.Attach(srv)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testServer{t: t, store: local, srv: core, door: srv, url: hs.URL}
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

// rawStream upgrades a plain TCP connection to the stream protocol by hand, so that
// tests can send frames no client would.
func rawStream(t testing.TB, ts *testServer) (net.Conn, *bufio.Reader) {
	t.Helper()
	return rawStreamWith(t, ts, "")
}

// rawStreamWith opens a stream whose upgrade request carries the extra header lines
// (each ending in \r\n).
func rawStreamWith(t testing.TB, ts *testServer, header string) (net.Conn, *bufio.Reader) {
	t.Helper()
	return kvtest.RawStream(t, ts.url, header)
}

func readResponse(t testing.TB, br *bufio.Reader) api.StreamResponse {
	t.Helper()
	return kvtest.ReadStreamResponse(t, br)
}

func sendReq(t *testing.T, conn interface{ Write([]byte) (int, error) }, r api.StreamRequest) {
	t.Helper()
	kvtest.SendStreamRequest(t, conn, r)
}

// leaderlessStore is a local store whose leader contact a test can cut.
type leaderlessStore = kvtest.Leaderless

// newTestServerWith serves st, a LocalStore with leader contact.
func newTestServerWith(t *testing.T, st *leaderlessStore) *testServer {
	t.Helper()
	return serveStore(t, st, st.LocalStore)
}

// put writes key = value over HTTP and returns the revision.
func (ts *testServer) put(key, value string) int64 {
	ts.t.Helper()
	var resp api.PutResponse
	ts.doJSON(http.MethodPut, api.PathKV+key, []byte(value), http.StatusOK, &resp)
	return resp.Revision
}
