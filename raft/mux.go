package raft

import (
	"errors"
	"net"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"
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

	closeOnce sync.Once
	closed    chan struct{}
}

func newMux(ln net.Listener, advertise net.Addr, rpc func(net.Conn)) *mux {
	m := &mux{ln: ln, advertise: advertise, raftConns: make(chan net.Conn, 16), rpc: rpc,
		closed: make(chan struct{})}
	go m.acceptLoop()
	return m
}

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
		go m.route(conn)
	}
}

func (m *mux) route(conn net.Conn) {
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	switch b[0] {
	case protoRaft:
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
	return dialProto(s.m.src, string(addr), protoRaft, timeout)
}

// dialProto connects to the raft port at addr, from src when set, and sends proto.
func dialProto(src net.IP, addr string, proto byte, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if src != nil {
		d.LocalAddr = &net.TCPAddr{IP: src}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte{proto}); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetWriteDeadline(time.Time{})
	return conn, nil
}
