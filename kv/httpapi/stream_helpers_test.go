package httpapi

import (
	"bufio"
	"net"
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// Stream-protocol helpers for httpapi's tests that reach the core through the stream door
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
	ts, _ := serveStore(t, st, kv.DefaultConfig())
	ts.store = st.LocalStore
	return ts
}
