package raft

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// Mutual TLS on the raft port. Both sides of every connection show a node
// certificate (URI SAN keel://node/<id>) signed by the cluster CA; a client
// certificate of the same CA is refused, so an operator's certificate cannot speak
// Raft. The dialing side also checks that the node it reached is the one the Raft
// configuration lists at that address; the accepting side passes the peer's node ID
// to serveRPC, and membership decides what that peer may do (authority.go).

// PeerTLS is what the raft port needs of the node's certificates (the agent gives
// internal/tlsutil's Reloader, which re-reads them on SIGHUP): the server and client
// sides of mutual TLS, and the node ID a verified peer certificate names.
type PeerTLS interface {
	PeerServerConfig() *tls.Config
	// PeerClientConfig accepts only node wantID's certificate when wantID is set.
	PeerClientConfig(wantID string) *tls.Config
	PeerNodeID(cs tls.ConnectionState) (string, error)
}

// serverHandshake runs the server side of the handshake under conn's read deadline.
func serverHandshake(conn net.Conn, r PeerTLS) (net.Conn, error) {
	tc := tls.Server(conn, r.PeerServerConfig())
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetWriteDeadline(time.Time{})
	return tc, nil
}

// clientHandshake runs the client side of the handshake, expecting node wantID when set.
func clientHandshake(conn net.Conn, r PeerTLS, wantID string, timeout time.Duration) (net.Conn, error) {
	tc := tls.Client(conn, r.PeerClientConfig(wantID))
	conn.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	conn.SetDeadline(time.Time{})
	return tc, nil
}

// serverHandshake is the accepting side's handshake on the mux: it also refuses a
// revoked certificate.
func (m *mux) serverHandshake(conn net.Conn) (net.Conn, string, error) {
	tc, err := serverHandshake(conn, m.tls)
	if err != nil {
		return nil, "", err
	}
	peer, err := m.checkPeer(tc)
	if err != nil {
		return nil, "", err
	}
	return tc, peer, nil
}

// checkPeer returns the node ID of tc's verified peer certificate, or closes tc and
// says why the certificate is refused (revoked).
func (m *mux) checkPeer(tc net.Conn) (string, error) {
	cs := tc.(*tls.Conn).ConnectionState()
	peer, err := m.tls.PeerNodeID(cs)
	if err == nil && m.gate != nil {
		err = m.gate.checkCert(peer, cs)
	}
	if err != nil {
		tc.Close()
		return "", err
	}
	return peer, nil
}

// clientHandshake is the dialing side's handshake on the mux: it also refuses a
// revoked certificate.
func (m *mux) clientHandshake(conn net.Conn, want string, timeout time.Duration) (net.Conn, error) {
	tc, err := clientHandshake(conn, m.tls, want, timeout)
	if err != nil {
		return nil, err
	}
	if _, err := m.checkPeer(tc); err != nil {
		return nil, err
	}
	return tc, nil
}

// peerNodeID is the node ID in the verified certificate of conn's peer; "" when the
// port is plain text.
func (n *Node) peerNodeID(conn net.Conn) string {
	tc, ok := conn.(*tls.Conn)
	if !ok || n.cfg.TLS == nil {
		return ""
	}
	id, err := n.cfg.TLS.PeerNodeID(tc.ConnectionState())
	if err != nil {
		return "" // cannot happen: the handshake refused such a peer
	}
	return id
}

// memberAt is the ID of the server the configuration lists at addr ("" if none).
func (n *Node) memberAt(addr string) string {
	for _, m := range *n.members.Load() {
		if m.Address == addr {
			return m.ID
		}
	}
	return ""
}
