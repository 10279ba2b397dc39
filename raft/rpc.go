package raft

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// keel's RPC on the raft port: a connection carries one request at a time, each a
// frame (uint32 length, then the payload). A request payload is a kind byte and a
// body; a response is a status byte (0 = ok) and a body (the result, or an error code
// byte and message).

const (
	rpcApply byte = iota + 1
	rpcReadIndex
	rpcAddVoter
	rpcAddNonvoter
	rpcRemove
	rpcTransfer
	rpcApplied
	rpcLeaderCall // appended: kinds are wire values shared with other releases
	rpcFormats    // the command formats this node applies (formats.go)
	// rpcApplyLeases is rpcApply whose result carries the keys' leases
	// (fsm.EncodeResultWithLeases); a leader of an earlier release answers "unknown
	// request kind" without applying anything, and the caller sends rpcApply instead.
	rpcApplyLeases
	// rpcRetire revokes a node's certificates and removes it (revoke.go); a leader of
	// an earlier release answers "unknown request kind".
	rpcRetire
	// rpcApplyAs is rpcApplyLeases with the caller's identity, which the leader checks
	// before applying (caller.go); a leader of an earlier release answers "unknown
	// request kind", and the caller forwards the write without it.
	rpcApplyAs
)

const (
	errCodeNoLeader byte = iota + 1
	errCodeNotLeader
	errCodeTimeout
	errCodeShutdown
	errCodeOther
	errCodeFormat // appended: codes are wire values shared with other releases
	errCodeRefused
)

// maxFrame bounds a frame: a command is at most a few MiB (values ≤ 1.5 MiB by default,
// 128 ops per transaction).
const maxFrame = 64 << 20

func writeFrame(w *bufio.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(n))
	w.Write(hdr[:])
	for _, p := range parts {
		w.Write(p)
	}
	return w.Flush()
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if string(hdr[:]) == "HTTP" {
		return nil, errors.New("raft rpc: the peer answered in HTTP: that is a keel HTTP API address " +
			"(-http-addr, default port 7370); Raft and -join take the Raft address (-raft-addr, default port 7371)")
	}
	if n == 0 || n > maxFrame {
		return nil, fmt.Errorf("raft rpc: bad frame length %d", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

func encodeErr(err error) []byte {
	code := errCodeOther
	switch {
	case errors.Is(err, ErrNoLeader):
		code = errCodeNoLeader
	case errors.Is(err, ErrNotLeader):
		code = errCodeNotLeader
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		code = errCodeTimeout
	case errors.Is(err, ErrShutdown):
		code = errCodeShutdown
	case errors.Is(err, ErrFormatNotAgreed):
		code = errCodeFormat
	case errors.Is(err, ErrCallerRefused):
		code = errCodeRefused
	}
	return append([]byte{1, code}, err.Error()...)
}

func decodeErr(b []byte) error {
	if len(b) < 1 {
		return errors.New("raft rpc: empty error")
	}
	msg := string(b[1:])
	var sentinel error
	switch b[0] {
	case errCodeNoLeader:
		sentinel = ErrNoLeader
	case errCodeNotLeader:
		sentinel = ErrNotLeader
	case errCodeTimeout:
		sentinel = ErrTimeout
	case errCodeShutdown:
		sentinel = ErrShutdown
	case errCodeFormat:
		sentinel = ErrFormatNotAgreed
	case errCodeRefused:
		sentinel = ErrCallerRefused
	default:
		return errors.New(msg)
	}
	if msg == sentinel.Error() {
		return sentinel
	}
	return fmt.Errorf("%w (remote: %s)", sentinel, msg)
}

// serveRPC answers requests on one connection until it fails or the node closes.
func (n *Node) serveRPC(conn net.Conn) {
	n.rpcConns.Add(conn)
	defer n.rpcConns.Remove(conn)
	defer conn.Close()
	peer := n.peerNodeID(conn) // "" on a plain-text port
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	for {
		req, err := readFrame(r)
		if err != nil {
			return
		}
		resp, err := n.handleRPC(peer, req[0], req[1:])
		if err != nil {
			err = writeFrame(w, encodeErr(err))
		} else {
			err = writeFrame(w, []byte{0}, resp)
		}
		if err != nil {
			return
		}
	}
}

// handleRPC answers one request of peer (its certificate's node ID; "" without TLS).
func (n *Node) handleRPC(peer string, kind byte, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	defer cancel()
	if (kind == rpcApplyLeases && n.cfg.noApplyLeasesRPC) || (kind == rpcApplyAs && n.cfg.noApplyAsRPC) {
		kind = 0 // answered as a release before it did
	}
	if err := n.mayCall(peer, kind); err != nil {
		return nil, err
	}
	switch kind {
	case rpcApply, rpcApplyLeases:
		// Forwarded writes are applied only here, never forwarded again: a stale
		// leader view on both sides must not make a write bounce.
		res, err := n.applyLocal(data(body))
		if err != nil {
			return nil, err
		}
		if kind == rpcApplyLeases {
			return fsm.EncodeResultWithLeases(res)
		}
		return fsm.EncodeResult(res)
	case rpcApplyAs:
		return n.applyAs(ctx, body)
	case rpcReadIndex:
		idx, err := n.leaderReadIndex(ctx)
		if err != nil {
			return nil, err
		}
		return binary.AppendUvarint(nil, idx), nil
	case rpcAddVoter, rpcAddNonvoter:
		id, addr, ok := strings.Cut(string(body), "\x00")
		if !ok {
			return nil, errors.New("raft rpc: bad join request")
		}
		if err := n.mayAdd(ctx, peer, id, addr); err != nil {
			return nil, err
		}
		return nil, n.addServer(ctx, id, addr, kind == rpcAddVoter)
	case rpcRemove:
		return nil, n.RemoveServer(ctx, string(body))
	case rpcRetire:
		return nil, n.RetireServer(ctx, string(body))
	case rpcTransfer:
		return nil, n.TransferLeadership(ctx, string(body))
	case rpcLeaderCall:
		return n.localLeaderCall(ctx, body)
	case rpcApplied:
		b := binary.AppendUvarint(nil, n.store.AppliedIndex())
		b = binary.AppendUvarint(b, n.nonce)
		// 1: this process opened existing Raft state, or it is rejoining after a
		// rebuild (the cluster removed it before its state was moved aside, so it
		// forgot no vote that counts): either way no wiped server for the leader to
		// remove. Older leaders read the byte the same way.
		if n.existing || n.Rejoining() {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		return b, nil
	}
	if kind == rpcFormats && !n.cfg.noFormatsRPC {
		return []byte{fsm.MinCommandFormat, fsm.MaxCommandFormat}, nil
	}
	return nil, fmt.Errorf("raft rpc: unknown request kind %d", kind)
}

type data []byte

// isUnknownKind: err is a peer's answer to a request kind its release predates.
func isUnknownKind(err error) bool {
	return err != nil && !errors.Is(err, errSent) && strings.Contains(err.Error(), "unknown request kind")
}

// errSent marks a transport failure after the request was written: the remote side may
// have acted on it, so the caller must not assume it did not.
var errSent = errors.New("raft rpc: connection failed after the request was sent")

// rpcPool keeps idle RPC connections per address; forwarded writes are the hot path of a
// follower, and a connection carries one request at a time.
type rpcPool struct {
	mux    *mux // dials (source address, TLS)
	mu     sync.Mutex
	idle   map[string][]*rpcConn
	closed bool
}

type rpcConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

const maxIdlePerAddr = 64

func (p *rpcPool) get(ctx context.Context, addr string) (*rpcConn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrShutdown
	}
	if list := p.idle[addr]; len(list) > 0 {
		c := list[len(list)-1]
		p.idle[addr] = list[:len(list)-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	conn, err := p.mux.dial(addr, protoRPC, timeout)
	if err != nil {
		return nil, err
	}
	return &rpcConn{c: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}, nil
}

func (p *rpcPool) put(addr string, c *rpcConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[addr]) >= maxIdlePerAddr {
		c.c.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]*rpcConn{}
	}
	p.idle[addr] = append(p.idle[addr], c)
}

func (p *rpcPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, list := range p.idle {
		for _, c := range list {
			c.c.Close()
		}
	}
	p.idle = nil
}

// call sends one request to addr and waits for its response, until ctx ends (then the
// error wraps context.Cause(ctx)). A transport failure before the request was written
// is returned as is (safe to retry elsewhere); after, it wraps errSent.
func (p *rpcPool) call(ctx context.Context, addr string, kind byte, body []byte) ([]byte, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("raft rpc to %s: not sent: %w", addr, context.Cause(ctx))
	}
	c, err := p.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	c.c.SetDeadline(deadline)
	// Ending ctx interrupts the call: a deadline in the past fails the blocked I/O.
	stop := context.AfterFunc(ctx, func() { c.c.SetDeadline(time.Unix(1, 0)) })
	if err := writeFrame(c.w, []byte{kind}, body); err != nil {
		stop()
		c.c.Close()
		// A pooled connection may have been closed by the peer while idle, or ctx
		// ended mid-frame; no complete frame reached a live server loop, so the
		// request is safe to retry.
		if ctx.Err() != nil {
			return nil, fmt.Errorf("raft rpc to %s: not sent: %w", addr, context.Cause(ctx))
		}
		return nil, fmt.Errorf("raft rpc to %s: %w", addr, err)
	}
	resp, err := readFrame(c.r)
	interrupted := !stop()
	if err != nil {
		c.c.Close()
		if interrupted {
			return nil, fmt.Errorf("%w: %s: %w", errSent, addr, context.Cause(ctx))
		}
		return nil, fmt.Errorf("%w: %s: %v", errSent, addr, err)
	}
	if interrupted {
		c.c.Close() // its deadline may be in the past
	} else {
		c.c.SetDeadline(time.Time{})
		p.put(addr, c)
	}
	if resp[0] != 0 {
		return nil, decodeErr(resp[1:])
	}
	return resp[1:], nil
}

// connSet tracks server-side connections so Close can cut them.
type connSet struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (s *connSet) Add(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
}

func (s *connSet) Remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

func (s *connSet) CloseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}
