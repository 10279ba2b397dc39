package stream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/kv/stream"
	"github.com/keel-kv/keel/raft"
)

// The stream door's tests run a real server (the core and its HTTP door, which
// upgrades GET /v1/stream) with this door attached, over real HTTP on 127.0.0.1,
// against kvtest.LocalStore (a real fsm.Store without replication).

// testServer is one server, its store and a plain HTTP client.
type testServer struct {
	t     testing.TB
	store *kvtest.LocalStore
	srv   *kv.Server
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
	srv, err := kv.NewServer(cfg, store, nil)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	stream.Attach(srv)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testServer{t: t, store: local, srv: srv, url: hs.URL}
}

// do sends one request and returns status, body and headers.
func (ts *testServer) do(method, path string, body []byte) (int, []byte, http.Header) {
	ts.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b, resp.Header
}

// doJSON sends a request, expects status want and decodes the body into out.
func (ts *testServer) doJSON(method, path string, body []byte, want int, out any) {
	ts.t.Helper()
	code, b, _ := ts.do(method, path, body)
	if code != want {
		ts.t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			ts.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
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
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /v1/stream HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: keel-stream/1\r\n"+header+"\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != api.StreamProtocol {
		t.Fatalf("upgrade = %v, %v", resp, err)
	}
	return conn, br
}

func readResponse(t testing.TB, br *bufio.Reader) api.StreamResponse {
	t.Helper()
	body, err := api.ReadStreamFrame(br, api.MaxStreamFrame)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	var r api.StreamResponse
	if err := api.DecodeStreamResponse(body, &r); err != nil {
		t.Fatalf("decode answer: %v", err)
	}
	return r
}

func sendReq(t *testing.T, conn interface{ Write([]byte) (int, error) }, r api.StreamRequest) {
	t.Helper()
	if _, err := conn.Write(api.AppendStreamRequest(nil, &r)); err != nil {
		t.Fatal(err)
	}
}

// leaderlessStore is a local store whose leader contact a test can cut.
type leaderlessStore struct {
	*kvtest.LocalStore
	lost   atomic.Bool
	mu     sync.Mutex
	cc     context.Context // as raft.Node's ContactContext
	cancel context.CancelCauseFunc
}

// cut takes the store's leader contact away.
func (s *leaderlessStore) cut() {
	s.lost.Store(true)
	s.ContactContext()
}

func (s *leaderlessStore) ContactContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cc == nil {
		s.cc, s.cancel = context.WithCancelCause(context.Background())
	}
	if err := s.LeaderContact(); err != nil {
		s.cancel(err)
	}
	return s.cc
}

// newTestServerWith serves st, a LocalStore with leader contact.
func newTestServerWith(t *testing.T, st *leaderlessStore) *testServer {
	t.Helper()
	return serveStore(t, st, st.LocalStore)
}

func (s *leaderlessStore) LeaderContact() error {
	if s.lost.Load() {
		return fmt.Errorf("%w: test cut the node off", raft.ErrNoLeader)
	}
	return nil
}

// put writes key = value over HTTP and returns the revision.
func (ts *testServer) put(key, value string) int64 {
	ts.t.Helper()
	var resp api.PutResponse
	ts.doJSON(http.MethodPut, api.PathKV+key, []byte(value), http.StatusOK, &resp)
	return resp.Revision
}
