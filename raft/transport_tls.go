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
// to serveRPC, which lets a peer add only itself unless it is a member already.

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

// mayAdd refuses a join request in which peer asks to add a node other than itself,
// unless peer is a member (a member forwards joins to the leader). Without TLS (peer
// "") there is no identity to check.
func (n *Node) mayAdd(peer, id string) error {
	if peer == "" || peer == id {
		return nil
	}
	for _, m := range *n.members.Load() {
		if m.ID == peer {
			return nil
		}
	}
	return fmt.Errorf("raft rpc: node %q may not add node %q: a node joins only as the node its certificate names", peer, id)
}
