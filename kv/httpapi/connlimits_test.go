package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// TestStreamStalledFrameIsClosed: a client that declares a frame and sends part of it
// (slow loris), or sends bytes that are not the protocol, is cut off by the frame
// deadline; an idle connection is not, and keeps working.
func TestStreamStalledFrameIsClosed(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.StreamFrameTimeout = 300 * time.Millisecond })
	for i, send := range []string{
		"\x32\x01",                        // a 50-byte frame, one byte of it
		"hello, this is not the protocol", // garbage after the upgrade
		"\xff\xff\xff\xff\xff\xff\x01",    // a frame length no client sends
	} {
		conn, br := rawStream(t, ts)
		conn.Write([]byte(send))
		start := time.Now()
		_, err := api.ReadStreamFrame(br, api.MaxStreamFrame)
		if !errors.Is(err, io.EOF) || time.Since(start) > 5*time.Second {
			t.Errorf("#%d: after %q: %v after %v, want the connection closed by the deadline", i, send, err, time.Since(start))
		}
	}
	conn, br := rawStream(t, ts)
	time.Sleep(700 * time.Millisecond) // idle longer than the frame deadline
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 1, Op: api.StreamPut, Key: []byte("k"), Value: []byte("v")}))
	if r := readResponse(t, br); r.ID != 1 || r.Err != nil {
		t.Fatalf("put on an idle connection = %+v (err %+v)", r, r.Err)
	}
}

// serveReal serves a Server on a loopback listener through Serve (so the listener's
// limits apply), and returns its address.
func serveReal(t *testing.T, opts ...func(*kv.Config)) (*Server, string) {
	t.Helper()
	cfg := kv.DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return serveOn(t, cfg, kvtest.New())
}

// serveOn runs a server with cfg over store through Server.Serve on a free loopback
// port (the path the agent takes, listener wrappers included), shut down at the end of
// the test, and returns it and its address.
func serveOn(t *testing.T, cfg kv.Config, store kv.Store) (*Server, string) {
	t.Helper()
	core, err := kv.NewServer(cfg, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(core)
	attachTestDoors(srv)
	port, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return srv, ln.Addr().String()
}

func TestConnectionLimit(t *testing.T) {
	_, addr := serveReal(t, func(c *kv.Config) { c.MaxConns = 2 })
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // both accepted
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	extra.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("third connection: %v, want a 429 answer", err)
	}
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusTooManyRequests || e.Reason != api.ReasonTooManyConnections ||
		!strings.Contains(e.Message, "maximum of 2 client connections") {
		t.Fatalf("third connection answered %d %+v", resp.StatusCode, e)
	}
	extra.Close()
	held[0].Close()
	// The freed slot serves again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + api.PathHealth)
		if err == nil && resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a connection closed: %v %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	held[1].Close()
}

// TestInFlightLimit: with the node's request slots all taken, an HTTP request and a
// stream request are answered 429 TooManyRequests and nothing is written; health
// checks still answer. Once slots free up, requests succeed.
func TestInFlightLimit(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxInFlight = 4 })
	conn, br := rawStream(t, ts)
	before := ts.store.FSM().Revision()
	takeSlots(t, ts.core, 4) // every slot taken
	code, body, hdr := ts.do(http.MethodPut, api.PathKV+"k", []byte("v"))
	if code != http.StatusTooManyRequests || !strings.Contains(string(body), api.ReasonTooManyRequests) || hdr.Get("Retry-After") == "" {
		t.Errorf("PUT at the limit = %d %s (Retry-After %q), want 429 TooManyRequests", code, body, hdr.Get("Retry-After"))
	}
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 7, Op: api.StreamPut, Key: []byte("k"), Value: []byte("v")}))
	if r := readResponse(t, br); r.ID != 7 || r.Err == nil || r.Err.Reason != api.ReasonTooManyRequests {
		t.Errorf("stream put at the limit = %+v (err %+v), want 429 TooManyRequests", r, r.Err)
	}
	if code, _, _ := ts.do(http.MethodGet, api.PathHealth, nil); code != http.StatusOK {
		t.Errorf("healthz at the limit = %d", code)
	}
	if got := ts.store.FSM().Revision(); got != before {
		t.Fatalf("revision moved %d → %d at the limit", before, got)
	}
	releaseSlots(ts.core, 4)
	if code, body, _ := ts.do(http.MethodPut, api.PathKV+"k", []byte("v")); code != http.StatusOK {
		t.Fatalf("PUT below the limit = %d %s", code, body)
	}
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 8, Op: api.StreamPut, Key: []byte("k"), Value: []byte("w")}))
	if r := readResponse(t, br); r.ID != 8 || r.Err != nil {
		t.Fatalf("stream put below the limit = %+v (err %+v)", r, r.Err)
	}
	// Every slot is given back — a handler releases its slot after it has written the
	// answer, so the client may read the answer first: wait for the last release.
	deadline := time.Now().Add(5 * time.Second)
	for !trySlots(ts.core, 4) {
		if time.Now().After(deadline) {
			t.Fatal("the node's 4 request slots were not all given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	releaseSlots(ts.core, 4)
}

// trySlots takes n request slots of core, or none: it gives back what it took and
// answers false when one is refused.
func trySlots(core *kv.Server, n int) bool {
	for i := range n {
		if core.AdmitRequest("") != nil {
			releaseSlots(core, i)
			return false
		}
	}
	return true
}

// takeSlots takes n request slots of core (from an unknown address: no per-client
// bound), failing the test if one is refused.
func takeSlots(t *testing.T, core *kv.Server, n int) {
	t.Helper()
	for i := range n {
		if err := core.AdmitRequest(""); err != nil {
			t.Fatalf("request slot %d of %d refused: %v", i+1, n, err)
		}
	}
}

func releaseSlots(core *kv.Server, n int) {
	for range n {
		core.ReleaseRequest("")
	}
}
