package etcdv3

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
)

// Request bytes in flight on the etcd door (issue #33). gRPC allocates a request
// message as its bytes arrive, and it opens a stream's flow-control window to the
// whole length a message's 5-byte prefix announces as soon as the call reads it —
// before any interceptor, stats handler or codec sees the call — so neither windows
// (gRPC grants the connection's window as bytes arrive, and a stream's to the
// announced length) nor hooks bound what a client that announces large messages and
// sends part of each holds: 2,500 calls of 8 MiB. What does is the core's budget
// (kv.Server.AdmitBytes), taken here, on the connection's bytes, when a message's
// prefix arrives:
//
//   - meteredConn reads the client's HTTP/2 frames as they pass to gRPC: a DATA
//     frame's payload is a stream's gRPC messages, each a 5-byte prefix (compressed
//     flag, big-endian length) and its body. As a prefix arrives its length is taken
//     from the client's and the node's bytes in flight; it is given back when the
//     stream's next message begins (gRPC has read this one) or the stream ends (the
//     server's END_STREAM or a RST_STREAM either way) or the connection closes.
//   - a message over the budget has its prefix's length rewritten, in the bytes gRPC
//     is about to read, to one above gRPC's MaxRecvMsgSize: gRPC refuses the call with
//     ResourceExhausted before it opens the window (the client reads gRPC's words,
//     "received message larger than max (4294967295 vs. N)": gRPC refuses the
//     message before any hook of the door could name the budget), and the client can
//     push at most the stream's initial window (64 KiB) more. A prefix
//     whose length bytes arrived in two reads cannot be rewritten whole: the
//     connection is closed (no gRPC client splits a prefix across frames, and a split
//     inside one frame needs a client over its budget and an unlucky read).
//   - the gateway's in-process connection is not metered: its HTTP requests take
//     their bytes at the HTTP handler (httpHandler), from the HTTP client's budget.

// errSplitPrefix: a message over budget whose prefix cannot be rewritten.
var errSplitPrefix = errors.New("etcdv3: a request message over its client's bytes in flight, its prefix split across reads")

// refusedLength is the length a refused message's prefix is rewritten to: over any
// MaxRecvMsgSize the door sets (kv.MaxRequestBytesLimit plus framing).
const refusedLength = 0xFFFFFFFF

// meteredConn is a server-side HTTP/2 connection whose request messages take their
// bytes from admit (above). Read is called by one goroutine (gRPC's reader) and
// Write by another (its writer); both and Close may run at once.
type meteredConn struct {
	net.Conn
	remote peerAddress // RemoteAddr, with its string made once
	admit  func(n int64) (release func(), err error)
	maxMsg uint32 // gRPC's MaxRecvMsgSize: a larger message is refused by gRPC itself

	mu      sync.Mutex
	in, out h2Frames
	streams map[uint32]*meteredStream
	newest  uint32 // the highest stream ID the client opened
	reads   uint64 // the number of the current Read
	closed  bool
}

// meteredStream is one call's message being read.
type meteredStream struct {
	prefix  [5]byte
	have    int       // bytes of prefix seen
	at      [5]int    // where each prefix byte sat in the buffer of its read,
	read    [5]uint64 // that read's number (meteredConn.reads)
	left    uint32    // body bytes of the current message still to come
	release func()    // gives the current message's bytes back; nil when none are held
}

// h2Frames is the parse state of one direction's frames.
type h2Frames struct {
	preface int // bytes of the client preface still to skip
	hdr     [9]byte
	have    int    // bytes of hdr seen
	left    uint32 // payload bytes of the current frame still to come
	data    bool   // the current frame is DATA: its payload is messages
	padded  bool   // ... and its first byte, not yet seen, is its pad length
	pad     uint32 // padding at the end of the payload
	sid     uint32
}

const (
	h2Data      = 0x0
	h2Headers   = 0x1
	h2RSTStream = 0x3
	h2EndStream = 0x1
	h2Padded    = 0x8
)

// meterConn meters c's request messages against the budget of its client.
func (e *Server) meterConn(c net.Conn) net.Conn {
	src := c.RemoteAddr().String()
	return &meteredConn{Conn: c, remote: peerAddress{Addr: c.RemoteAddr(), s: src},
		admit:  func(n int64) (func(), error) { return e.core.AdmitBytes(src, n) },
		maxMsg: uint32(e.maxRecvMsgBytes()), in: h2Frames{preface: len(http2Preface)},
		streams: map[uint32]*meteredStream{}}
}

// RemoteAddr is the client's address. gRPC gives it to each call as its peer, and
// tap asks its String for every call (peerAddr): made once a connection, not a call.
func (c *meteredConn) RemoteAddr() net.Addr { return c.remote }

// peerAddress is a net.Addr whose String was made once.
type peerAddress struct {
	net.Addr
	s string
}

func (a peerAddress) String() string { return a.s }

func (c *meteredConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		perr := c.readFrames(p[:n])
		c.mu.Unlock()
		if perr != nil {
			c.Close()
			return 0, perr
		}
	}
	return n, err
}

func (c *meteredConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writeFrames(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Close gives back every byte the connection's streams hold.
func (c *meteredConn) Close() error {
	c.mu.Lock()
	c.closed = true
	for id := range c.streams {
		c.end(id)
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// frames walks b, one direction's bytes, calling header for each frame header and
// payload for each run of a DATA frame's message bytes (padding left out).
func (f *h2Frames) frames(b []byte, header func(typ, flags byte, sid uint32), payload func(sid uint32, b []byte, off int) error) error {
	for i := 0; i < len(b); {
		switch {
		case f.preface > 0:
			k := min(f.preface, len(b)-i)
			f.preface -= k
			i += k
		case f.have < len(f.hdr):
			k := copy(f.hdr[f.have:], b[i:])
			f.have += k
			i += k
			if f.have < len(f.hdr) {
				continue
			}
			typ, flags := f.hdr[3], f.hdr[4]
			f.left = uint32(f.hdr[0])<<16 | uint32(f.hdr[1])<<8 | uint32(f.hdr[2])
			f.sid = binary.BigEndian.Uint32(f.hdr[5:]) & 0x7fffffff
			f.data, f.padded, f.pad = typ == h2Data, typ == h2Data && flags&h2Padded != 0, 0
			header(typ, flags, f.sid)
			if f.left == 0 {
				f.have = 0
			}
		default:
			k := int(min(f.left, uint32(len(b)-i)))
			run := b[i : i+k]
			if f.data && f.padded {
				f.pad, f.padded = uint32(run[0]), false
				run, i, f.left = run[1:], i+1, f.left-1
				k--
			}
			if body := int(max(int64(f.left)-int64(f.pad), 0)); f.data && body > 0 && k > 0 {
				if err := payload(f.sid, run[:min(k, body)], i); err != nil {
					return err
				}
			}
			i += k
			if f.left -= uint32(k); f.left == 0 {
				f.have = 0
			}
		}
	}
	return nil
}

// readFrames follows the client's frames in b, which gRPC reads next: it opens a
// stream at its HEADERS, ends it at a RST_STREAM, and meters the messages of its DATA.
func (c *meteredConn) readFrames(b []byte) error {
	c.reads++
	return c.in.frames(b, func(typ, _ byte, sid uint32) {
		switch {
		case typ == h2Headers && sid > c.newest:
			c.newest = sid
			c.streams[sid] = &meteredStream{}
		case typ == h2RSTStream:
			c.end(sid)
		}
	}, func(sid uint32, run []byte, off int) error {
		s := c.streams[sid]
		if s == nil {
			return nil // ended (or never opened): gRPC drops its data
		}
		return c.meter(s, b, run, off)
	})
}

// meter counts run, the next message bytes of s (at off in b, the read's buffer).
func (c *meteredConn) meter(s *meteredStream, b, run []byte, off int) error {
	for i := 0; i < len(run); {
		if s.left > 0 {
			k := min(s.left, uint32(len(run)-i))
			s.left -= k
			i += int(k)
			continue
		}
		if s.have == 0 && s.release != nil { // gRPC has read the previous message
			s.release()
			s.release = nil
		}
		s.prefix[s.have], s.at[s.have], s.read[s.have] = run[i], off+i, c.reads
		s.have++
		i++
		if s.have < len(s.prefix) {
			continue
		}
		s.have, s.left = 0, binary.BigEndian.Uint32(s.prefix[1:])
		if s.left == 0 || s.left > c.maxMsg || c.closed {
			continue // nothing to hold, or gRPC refuses it itself
		}
		release, err := c.admit(int64(s.left))
		if err == nil {
			s.release = release
			continue
		}
		for k := 1; k < len(s.prefix); k++ {
			if s.read[k] != c.reads {
				return errSplitPrefix
			}
		}
		binary.BigEndian.PutUint32(s.prefix[1:], refusedLength)
		for k := 1; k < len(s.prefix); k++ {
			b[s.at[k]] = s.prefix[k]
		}
	}
	return nil
}

// writeFrames follows the server's frames in b: a stream ends at its END_STREAM (the
// trailers) or a RST_STREAM.
func (c *meteredConn) writeFrames(b []byte) {
	c.out.frames(b, func(typ, flags byte, sid uint32) {
		if typ == h2RSTStream || (typ == h2Headers || typ == h2Data) && flags&h2EndStream != 0 {
			c.end(sid)
		}
	}, func(uint32, []byte, int) error { return nil })
}

// end forgets stream sid and gives back the bytes it holds.
func (c *meteredConn) end(sid uint32) {
	if s := c.streams[sid]; s != nil {
		if s.release != nil {
			s.release()
		}
		delete(c.streams, sid)
	}
}
