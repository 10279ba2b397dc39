package kv

import (
	"bufio"
	"context"
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

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/raft"
)

// Stream-protocol helpers for kv's tests that reach the core through the stream door
// (attached by doors_ext_test.go); the door's own tests are in kv/stream.

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
	srv, err := NewServer(DefaultConfig(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	attachTestDoors(srv)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testServer{t: t, store: st.LocalStore, srv: srv, url: hs.URL}
}

func (s *leaderlessStore) LeaderContact() error {
	if s.lost.Load() {
		return fmt.Errorf("%w: test cut the node off", raft.ErrNoLeader)
	}
	return nil
}
