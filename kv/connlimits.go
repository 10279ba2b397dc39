package kv

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Limits that keep slow or greedy clients from holding a node's resources:
//
//   - connections: at most MaxConns client connections (HTTP and stream) are open at
//     once, and at most MaxConnsPerClient from one source IP address, so that one
//     client holding idle connections cannot lock everyone else out (health checks
//     included); one more is answered 429 TooManyConnections and closed. The source
//     is the address, not a client certificate: the limit is applied at accept,
//     before any TLS handshake.
//   - streams: a long-lived stream multiplexed on a connection (the etcd door's
//     Watch, LeaseKeepAlive, RangeStream, Snapshot and gRPC health Watch) counts
//     against the same per-client budget as a connection (OpenStream): on HTTP and
//     the stream protocol a watch or a stream holds a connection of its own, and on
//     gRPC it must cost the client the same, or one connection would hold what
//     thousands do (issue #33: 50,000 idle Watch streams on one connection held
//     200,000 goroutines and 1.1 GB).
//   - requests in flight: at most MaxInFlight requests (HTTP, every request of every
//     stream, and the etcd door's) run at once, and at most MaxInFlightPerClient from
//     one source IP address, so one client cannot keep every slot busy; one more is
//     answered 429 TooManyRequests. Health checks and watches do not count (watches
//     have MaxWatches and MaxWatchesPerToken).
//   - per stream connection: at most MaxStreamInFlight requests in flight; the server
//     stops reading the connection until one finishes (backpressure, no error). Per
//     etcd-door connection, as many calls open at once (HTTP/2's max concurrent
//     streams: the client waits to open one more).
//   - a stream frame, once begun, must arrive whole within StreamFrameTimeout, or the
//     connection is closed (a client that declares a frame and stalls, or sends bytes
//     that are not the protocol).
//
// What one client can hold with the defaults, measured (bench/README.md, issue #33):
// 2,500 connections and streams together (MaxConnsPerClient), each ~3 goroutines and
// at most ~60 KiB (an idle etcd connection's buffers; an idle Watch stream ~35 KiB),
// and 2,500 requests in flight (MaxInFlightPerClient: on HTTP/1.1 each takes a
// connection anyway; on the etcd door a call whose request never comes holds a
// goroutine, ~12 KiB): at most ~10,000 goroutines and ~200 MiB with the etcd door's
// largest metadata, whatever door it uses; and its request bodies at most
// MaxRequestBytesInFlightPerClient (64 MiB) more, taken as each body's size is
// announced (bytelimits.go).

// MaxHeaderListBytes bounds the headers of one request on every HTTP/2 door — the
// etcd door's calls (gRPC's metadata) and the HTTP port's h2c streams (HTTP/2's
// SETTINGS_MAX_HEADER_LIST_SIZE: names, values and 32 bytes each) — and of an
// HTTP/1.1 request (http.Server.MaxHeaderBytes): a request over it is refused before
// it runs. etcd's clients send a few hundred bytes (the token, the authority, user
// agent, require-leader, timeout; kube-apiserver adds a trace context), and keel's a
// bearer token, so 16 KiB leaves room for a long JWT and tracing baggage, where gRPC's
// default of 16 MB let 60 tokenless health streams of 15 MB each take a node from 33
// MB to 974 MB (issue #33), and net/http's 1 MiB let each h2c stream keep a megabyte.
// The headers of every request one client may hold at once (2,500 streams and 2,500
// requests) then stay under 80 MiB.
const MaxHeaderListBytes = 16 << 10

// MaxHTTP2FrameBytes is the largest HTTP/2 frame a door reads (SETTINGS_MAX_FRAME_SIZE):
// HTTP/2's default and gRPC's, where x/net's server would read 1 MiB frames.
const MaxHTTP2FrameBytes = 16 << 10

// ErrTooManyRequests: the node runs its maximum of requests; retry later or elsewhere.
var ErrTooManyRequests = errors.New("kv: too many requests in flight")

// ErrTooManyConnections: the node holds its maximum of client connections.
var ErrTooManyConnections = errors.New("kv: too many connections")

// limitListener closes connections beyond max (or beyond perClient from one source
// address) with a 429 answer.
type limitListener struct {
	net.Listener
	max       int
	open      *atomic.Int64
	perClient int // 0: no bound per source
	clients   *clientConns
}

// LimitListener bounds the connections ln accepts by the node's MaxConns and
// MaxConnsPerClient, counted together with every other door's: the HTTP port (the
// stream protocol upgrades from it) and the etcd port share one count. A connection
// over a bound is answered 429 (a plain HTTP/1.1 answer) and closed.
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	return limitListener{Listener: ln, max: s.cfg.MaxConns, open: &s.conns, perClient: s.cfg.MaxConnsPerClient,
		clients: &s.connClients}
}

// clientConns counts the open connections of each source IP address.
type clientConns struct {
	mu sync.Mutex
	n  map[string]int
}

// take counts one more connection of src unless it holds max already.
func (cc *clientConns) take(src string, max int) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.n[src] >= max {
		return false
	}
	if cc.n == nil {
		cc.n = map[string]int{}
	}
	cc.n[src]++
	return true
}

func (cc *clientConns) give(src string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.n[src]--; cc.n[src] <= 0 {
		delete(cc.n, src)
	}
}

// sourceOf is the IP address of a connection's peer (the whole address if it has no
// port).
func sourceOf(c net.Conn) string { return hostOf(c.RemoteAddr().String()) }

func (l limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > int64(l.max) {
			l.open.Add(-1)
			go refuseConn(c, fmt.Sprintf("this node holds its maximum of %d client connections", l.max))
			continue
		}
		cc := &countedConn{Conn: c, open: l.open}
		if l.perClient > 0 {
			src := sourceOf(c)
			if !l.clients.take(src, l.perClient) {
				l.open.Add(-1)
				go refuseConn(c, fmt.Sprintf("this node holds its maximum of %d client connections from one address", l.perClient))
				continue
			}
			cc.release = func() { l.clients.give(src) }
		}
		return cc, nil
	}
}

// refuseConn answers a connection over the limit and closes it (bounded in time: a
// client that never reads cannot keep it).
func refuseConn(c net.Conn, why string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	msg := fmt.Sprintf(`{"code":429,"reason":%q,"message":"%s: retry later or on another node"}`,
		api.ReasonTooManyConnections, why)
	fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		len(msg), msg)
}

// countedConn gives its slot back once, on the first Close.
type countedConn struct {
	net.Conn
	open    *atomic.Int64
	release func() // gives back the source's count; nil without a per-source bound
	once    sync.Once
}

// NetConn is the connection c counts (a door unwraps it to find its TLS session).
func (c *countedConn) NetConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.open.Add(-1)
		if c.release != nil {
			c.release()
		}
	})
	return c.Conn.Close()
}

// OpenStream counts one long-lived stream of the client at addr (its "host:port" or
// host) against the budget its connections count against, MaxConnsPerClient by source
// IP address: every door's connections and streams share it. It returns the function
// that gives the slot back (once), or ErrTooManyConnections when the client holds its
// maximum. Without a per-client bound (MaxConnsPerClient 0), or from an unknown
// address (""), nothing is counted.
func (s *Server) OpenStream(addr string) (release func(), err error) {
	max, src := s.cfg.MaxConnsPerClient, hostOf(addr)
	if max <= 0 || src == "" {
		return func() {}, nil
	}
	if !s.connClients.take(src, max) {
		return nil, fmt.Errorf("%w: this node holds its maximum of %d connections and streams from one address: "+
			"end one, or retry later or on another node", ErrTooManyConnections, max)
	}
	return sync.OnceFunc(func() { s.connClients.give(src) }), nil
}

// acquireRequest takes a slot for one request in flight from the source address src
// ("" for none known); false when none is free. releaseRequest(src) gives it back.
// Every door (HTTP, the stream protocol, the etcd API) takes its slots here.
func (s *Server) acquireRequest(src string) bool {
	if s.inFlight.Add(1) > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		return false
	}
	if max := s.cfg.MaxInFlightPerClient; max > 0 && src != "" && !s.clientInFlight.take(src, max) {
		s.inFlight.Add(-1)
		return false
	}
	return true
}

// releaseRequest gives back a slot acquireRequest(src) took.
func (s *Server) releaseRequest(src string) {
	if s.cfg.MaxInFlightPerClient > 0 && src != "" {
		s.clientInFlight.give(src)
	}
	s.inFlight.Add(-1)
}

func (s *Server) tooManyRequests() error {
	return fmt.Errorf("%w: this node runs its maximum of %d requests at once, or %d from one address: "+
		"retry later or on another node", ErrTooManyRequests, s.cfg.MaxInFlight, s.cfg.MaxInFlightPerClient)
}

// hostOf is the IP address part of a peer address ("host:port"), the whole string if
// it has no port.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
