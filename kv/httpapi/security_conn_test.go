package httpapi

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// dialFrom opens a TCP connection to addr from the loopback address local.
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s (no 127.0.0.0/8 loopback here?): %v", local, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConnLimitPerClient: one client (127.0.0.2) holding its maximum of idle
// connections is refused one more, while another client (127.0.0.3) still gets its
// health check answered (kills: no per-source bound — the first client then takes
// every slot of the node and the health check gets 429).
//
//	MaxConns 3, MaxConnsPerClient 2
//	127.0.0.2: conn 1, conn 2 held; conn 3 → 429
//	127.0.0.3: GET /healthz → 200
func TestConnLimitPerClient(t *testing.T) {
	_, addr := serveReal(t, func(c *kv.Config) { c.MaxConns, c.MaxConnsPerClient = 3, 2 })
	dialFrom(t, "127.0.0.2", addr)
	dialFrom(t, "127.0.0.2", addr)
	extra := dialFrom(t, "127.0.0.2", addr)
	extra.SetDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(extra), nil); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third connection of one client: %v %v, want a 429 answer", resp, err)
	}
	other := dialFrom(t, "127.0.0.3", addr)
	other.SetDeadline(time.Now().Add(5 * time.Second))
	other.Write([]byte("GET " + api.PathHealth + " HTTP/1.1\r\nHost: x\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(other), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health check of another client: %v %v, want 200", resp, err)
	}
}

// TestInFlightLimitPerClient: one client (127.0.0.2) with its maximum of requests in
// flight is refused one more with 429, while another client (127.0.0.3) is still
// served (kills: no per-source bound on requests in flight — the first client then
// takes every slot of the node).
//
//	MaxInFlight 3, MaxInFlightPerClient 2; linearizable reads held
//	127.0.0.2: GET k, GET k in flight; GET k → 429
//	127.0.0.3: GET k → served once the reads are released
func TestInFlightLimitPerClient(t *testing.T) {
	ts := newTestServer(t)
	ts.put("k", "v")
	cfg := kv.DefaultConfig()
	cfg.MaxInFlight, cfg.MaxInFlightPerClient = 3, 2
	_, addr := serveOn(t, cfg, ts.store)
	get := func(c net.Conn) { c.Write([]byte("GET /v1/kv/k HTTP/1.1\r\nHost: x\r\n\r\n")) }
	release := ts.store.HoldLinearizable()
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	held := []net.Conn{dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)}
	for _, c := range held {
		get(c)
	}
	waitUntil(t, 5*time.Second, "two reads held", func() bool { return ts.store.Held() == 2 })
	extra := dialFrom(t, "127.0.0.2", addr)
	extra.SetDeadline(time.Now().Add(5 * time.Second))
	get(extra)
	if resp, err := http.ReadResponse(bufio.NewReader(extra), nil); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third request of one client: %v %v, want 429", resp, err)
	}
	other := dialFrom(t, "127.0.0.3", addr)
	other.SetDeadline(time.Now().Add(5 * time.Second))
	get(other)
	waitUntil(t, 5*time.Second, "the other client's read held", func() bool { return ts.store.Held() == 3 })
	release()
	released = true
	resp, err := http.ReadResponse(bufio.NewReader(other), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request of another client: %v %v, want 200", resp, err)
	}
}
