package raft

import (
	"net"

	"github.com/keel-kv/keel/internal/connlimit"
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
	maxPendingConns       = 256
	maxPendingPerSource   = 64
)

// admit counts a newly accepted connection as open and pending, or closes it when a
// bound is reached (false). The returned connection gives its open slot back when
// closed; the caller gives the pending slot back (m.pending.Give) once the peer has
// authenticated and said what it carries.
func (m *mux) admit(conn net.Conn) (net.Conn, string, bool) {
	src := connlimit.Source(conn)
	if !m.pending.Take(src) {
		conn.Close()
		return nil, "", false
	}
	conn, ok := m.open.Admit(conn)
	if !ok {
		m.pending.Give(src)
		return nil, "", false
	}
	return conn, src, true
}
