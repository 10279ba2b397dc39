package raft

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/internal/connlimit"
)

// The first byte of every connection to the raft port says what it carries.
const (
	protoRaft byte = 1
	protoRPC  byte = 2
)

// mux accepts connections on the raft port and routes them by their first byte: Raft
// connections to the transport (through streamLayer), RPC connections to serveRPC.
type mux struct {
	ln        net.Listener
	advertise net.Addr
	raftConns chan net.Conn
	rpc       func(net.Conn)
	src       net.IP // source of outgoing connections; nil = the kernel's choice
	// tls, when set, makes the port mutual TLS (transport_tls.go): every connection,
	// Raft or RPC, starts with a handshake in which both sides show a node certificate
	// signed by the cluster CA. idOf names the node expected at a dialed address
	// ("" when unknown, as when joining).
	tls  PeerTLS
	idOf func(addr string) string
	// gate, when set, decides after each handshake (authority.go): it refuses a
	// revoked certificate on either side, and a Raft connection of a non-member.
	gate peerGate
	// accepted tracks the accepted Raft connections (TLS) by their peer's node ID, so
	// that those of a node that leaves the configuration can be cut. RPC connections
	// need no cutting: membership is checked on every request.
	accepted peerConns
	// open and pending bound the accepted connections (connlimit.go).
	open, pending *connlimit.Counter

	closeOnce sync.Once
	closed    chan struct{}
}

// peerGate is what the mux asks of the node after a TLS handshake.
type peerGate interface {
	// checkCert refuses a peer certificate the cluster has revoked.
	checkCert(peer string, cs tls.ConnectionState) error
	// admitRaft reports whether peer may speak hashicorp/raft's protocol here.
	admitRaft(peer string) bool
}

// newMux makes the mux of the raft port; it accepts connections once start is called
// (after the node's raft is up, which the routed connections use).
func newMux(ln net.Listener, advertise net.Addr, rpc func(net.Conn), src net.IP, tls PeerTLS,
	idOf func(string) string, gate peerGate) *mux {
	return &mux{ln: ln, advertise: advertise, raftConns: make(chan net.Conn, 16), rpc: rpc,
		closed: make(chan struct{}), src: src, tls: tls, idOf: idOf, gate: gate,
		open: connlimit.New(maxPortConns, maxPortConnsPerSource), pending: connlimit.New(maxPendingConns, maxPendingPerSource)}
}

func (m *mux) start() { go m.acceptLoop() }

func (m *mux) acceptLoop() {
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if conn, src, ok := m.admit(conn); ok {
			go m.route(conn, src)
		}
	}
}

func (m *mux) route(conn net.Conn, src string) {
	authenticated := sync.OnceFunc(func() { m.pending.Give(src) })
	defer authenticated()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	peer := ""
	if m.tls != nil {
		var err error
		if conn, peer, err = m.serverHandshake(conn); err != nil {
			return
		}
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	authenticated()
	switch b[0] {
	case protoRaft:
		if m.tls != nil && m.gate != nil {
			if !m.gate.admitRaft(peer) {
				conn.Close() // not a member: no AppendEntries, votes or snapshots from it
				return
			}
			conn = m.accepted.add(conn, peer)
		}
		select {
		case m.raftConns <- conn:
		case <-m.closed:
			conn.Close()
		}
	case protoRPC:
		m.rpc(conn)
	default:
		conn.Close()
	}
}

func (m *mux) Close() error {
	m.closeOnce.Do(func() { close(m.closed) })
	return m.ln.Close()
}

// streamLayer is the hraft.StreamLayer of the Raft transport over the mux.
type streamLayer struct{ m *mux }

var _ hraft.StreamLayer = streamLayer{}

func (s streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.m.raftConns:
		return c, nil
	case <-s.m.closed:
		return nil, net.ErrClosed
	}
}

func (s streamLayer) Close() error   { return s.m.Close() }
func (s streamLayer) Addr() net.Addr { return s.m.advertise }

func (s streamLayer) Dial(addr hraft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.m.dial(string(addr), protoRaft, timeout)
}

// dial connects to the raft port at addr, from src when set, through mutual TLS when
// on, and sends proto. With TLS the peer must be the node the configuration lists at
// addr, when it lists one.
func (m *mux) dial(addr string, proto byte, timeout time.Duration) (net.Conn, error) {
	want := ""
	if m.tls != nil && m.idOf != nil {
		want = m.idOf(addr)
	}
	return m.dialNode(addr, want, proto, timeout)
}

// dialNode is dial expecting node want at addr ("": any node of the CA).
func (m *mux) dialNode(addr, want string, proto byte, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if m.src != nil {
		d.LocalAddr = &net.TCPAddr{IP: m.src}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if m.tls != nil {
		raddr := conn.RemoteAddr()
		if conn, err = m.clientHandshake(conn, want, timeout); err != nil {
			// Part of dialing: nothing was sent, so a request may go again (to this
			// node once it is back, or to the next leader), as after a refused dial.
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: err}
		}
	}
	conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte{proto}); err != nil {
		conn.Close()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: conn.RemoteAddr(), Err: err}
	}
	conn.SetWriteDeadline(time.Time{})
	return conn, nil
}
