package raft

import (
	"net"
	"sync"
)

// Connection bounds of the raft port, so that a flood of connections (idle ones will
// do) cannot exhaust the node's file descriptors (EMFILE) and lock its members out:
//
//   - open: every accepted connection until it closes, at most maxPortConns, and
//     maxPortConnsPerSource from one source IP address;
//   - pending: connections that have not yet finished the TLS handshake and sent
//     their first byte (anyone can open those), at most maxPendingConns, and
//     maxPendingPerSource from one source IP address. A pending connection is closed
//     after 10 s without its handshake.
//
// A connection beyond a bound is closed at once. A member dials from its own address,
// so a flood from elsewhere fills its own per-source bounds and leaves the member
// room; members hold a handful of connections each (Raft's pool of 5 per peer, RPC).
const (
	maxPortConns          = 1024
	maxPortConnsPerSource = 256
	maxPendingConns       = 128
	maxPendingPerSource   = 16
)

// connCounter counts connections in total and by source address.
type connCounter struct {
	mu        sync.Mutex
	max       int
	perSource int
	total     int
	n         map[string]int
}

func newConnCounter(max, perSource int) *connCounter {
	return &connCounter{max: max, perSource: perSource, n: map[string]int{}}
}

// take counts one more connection of src unless a bound is reached.
func (c *connCounter) take(src string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total >= c.max || c.n[src] >= c.perSource {
		return false
	}
	c.total++
	c.n[src]++
	return true
}

func (c *connCounter) give(src string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.n[src]--; c.n[src] <= 0 {
		delete(c.n, src)
	}
}

// admit counts a newly accepted connection as open and pending, or closes it when a
// bound is reached (false). The returned connection gives its open slot back when
// closed; the caller gives the pending slot back (m.pending.give) once the peer has
// authenticated and said what it carries.
func (m *mux) admit(conn net.Conn) (net.Conn, string, bool) {
	src := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(src); err == nil {
		src = host
	}
	if !m.open.take(src) {
		conn.Close()
		return nil, "", false
	}
	if !m.pending.take(src) {
		m.open.give(src)
		conn.Close()
		return nil, "", false
	}
	return &countedConn{Conn: conn, release: sync.OnceFunc(func() { m.open.give(src) })}, src, true
}

// countedConn gives its open slot back when closed.
type countedConn struct {
	net.Conn
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
