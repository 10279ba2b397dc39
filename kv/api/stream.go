package api

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The stream protocol carries single-key reads and writes (the operations of
// /v1/kv/{key} without ?list or ?prefix) as binary frames over one long-lived TCP
// connection, many requests in flight at once, answered in any order. It exists for
// throughput: a request costs a few dozen bytes and no HTTP parsing, and answers to
// concurrent requests leave in one write. The semantics (consistency, revisions,
// compare-and-swap, errors) are exactly those of the HTTP routes.
//
// A client opens it with an HTTP/1.1 upgrade on the API port:
//
//	GET /v1/stream HTTP/1.1
//	Connection: Upgrade
//	Upgrade: keel-stream/1
//
// and, after "101 Switching Protocols", both sides exchange frames:
//
//	frame    = length:uvarint body            (length of body, at most MaxStreamFrame)
//	request  = id:uvarint op:byte flags:byte key:bytes args
//	           get:    revision:uvarint       (0 = latest)
//	           put:    value:bytes [prev_revision:uvarint if flags&StreamFlagPrev]
//	           delete: [prev_revision:uvarint if flags&StreamFlagPrev]
//	response = id:uvarint op:byte status:byte result
//	           status 0, get:    revision:uvarint create_revision:uvarint
//	                             mod_revision:uvarint version:uvarint value:bytes
//	           status 0, put:    revision:uvarint
//	           status 0, delete: revision:uvarint deleted:uvarint
//	           status 1 (error): code:uvarint reason:bytes message:bytes
//
// where bytes is uvarint(len) followed by len bytes. The id is the client's; the
// server echoes it. A request frame the server cannot parse is answered with a 400
// error for its id, one longer than the server's limit with a 413; only a frame whose
// id cannot be read closes the connection.
const (
	PathStream     = "/v1/stream"
	StreamProtocol = "keel-stream/1"
	// MaxStreamFrame bounds any frame either side accepts; a server's own limit
	// (its maximum value size) is usually far lower.
	MaxStreamFrame = 64 << 20
)

// StreamOp is the operation of a stream request.
type StreamOp byte

// Stream operations.
const (
	StreamGet    StreamOp = 1
	StreamPut    StreamOp = 2
	StreamDelete StreamOp = 3
)

func (o StreamOp) String() string {
	switch o {
	case StreamGet:
		return "get"
	case StreamPut:
		return "put"
	case StreamDelete:
		return "delete"
	case StreamWatch:
		return "watch"
	case StreamWatchCancel:
		return "cancel"
	case StreamLeaseGrant:
		return "lease-grant"
	case StreamLeaseKeepAlive:
		return "lease-keepalive"
	case StreamLeaseRevoke:
		return "lease-revoke"
	case StreamTxn:
		return "txn"
	}
	return fmt.Sprintf("op(%d)", byte(o))
}

// Request flags.
const (
	// StreamFlagSerializable: a get reads the answering node's local state.
	StreamFlagSerializable = 1 << 0
	// StreamFlagPrev: a put or delete carries prev_revision (compare-and-swap).
	StreamFlagPrev = 1 << 1
)

// HeaderHasToken reports whether header name of h lists token (comma-separated,
// case-insensitive), as Connection, Upgrade and HeaderStreamFeatures do.
func HeaderHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// ErrBadStreamFrame: bytes that are not a frame of the stream protocol.
var ErrBadStreamFrame = errors.New("api: malformed stream frame")

// StreamRequest is one request frame.
type StreamRequest struct {
	ID           uint64
	Op           StreamOp
	Key          []byte
	Value        []byte // put
	Revision     int64  // get: 0 = latest
	Serializable bool   // get
	PrevRevision int64  // put, delete: valid when HasPrev
	HasPrev      bool
	// Watch (StreamWatch; Revision is its start_revision, Serializable its start).
	Prefix   bool
	PrevKV   bool
	Progress time.Duration // 0: no progress frames; whole milliseconds on the wire
	// RequireLeader: the watch ends (reason NoLeader) once the node loses contact
	// with the leader, and does not start without it (StreamFlagRequireLeader).
	RequireLeader bool
	// Leases (stream_lease.go): the lease of a lease op, or the one a put attaches to
	// (HasLease); TTL is a grant's, whole seconds on the wire.
	LeaseID  int64
	HasLease bool
	TTL      time.Duration
}

// StreamResponse is one response frame. Err is set on failure (status 1).
type StreamResponse struct {
	ID       uint64
	Op       StreamOp
	Err      *Error
	Revision int64
	KV       KV    // get
	Deleted  int64 // delete
	// Watch answers (op StreamWatch, Err nil): Watch says which; Revision is the
	// created, events, progress or last revision (stream_watch.go).
	Watch  StreamWatchStatus
	Events []StreamEvent // StreamWatchEvents
	// Shared: the other watches this events frame is for (a shared frame, status 5
	// on the wire); their events are these, read-only.
	Shared          []uint64
	CompactRevision int64  // StreamWatchEnd
	Reason, Message string // StreamWatchEnd
	// Lease answers (stream_lease.go): the lease, and the TTL granted or left
	// (milliseconds on the wire); a revoke's are Revision and Deleted.
	LeaseID int64
	TTL     time.Duration
	// Body is a txn answer's JSON api.TxnResponse (stream_txn.go).
	Body []byte
}

// AppendStreamRequest appends r as one frame (length prefix included).
func AppendStreamRequest(b []byte, r *StreamRequest) []byte {
	if r.Op == StreamWatch || r.Op == StreamWatchCancel {
		var flags byte
		if r.Op == StreamWatch {
			flags = watchFlags(r)
		}
		body := binary.AppendUvarint(nil, r.ID)
		body = append(body, byte(r.Op), flags)
		body = appendBinBytes(body, r.Key)
		return appendFramed(b, appendWatchRequest(body, r))
	}
	if isLeaseOp(r.Op) || r.Op == StreamTxn {
		body := binary.AppendUvarint(nil, r.ID)
		body = append(body, byte(r.Op), 0)
		body = appendBinBytes(body, r.Key)
		if r.Op == StreamTxn {
			return appendFramed(b, appendTxnRequest(body, r))
		}
		return appendFramed(b, appendLeaseRequest(body, r))
	}
	var flags byte
	if r.Serializable {
		flags |= StreamFlagSerializable
	}
	if r.HasPrev {
		flags |= StreamFlagPrev
	}
	hasLease := r.HasLease && r.Op == StreamPut
	if hasLease {
		flags |= StreamFlagLease
	}
	n := uvarintLen(r.ID) + 2 + bytesLen(len(r.Key))
	switch r.Op {
	case StreamGet:
		n += uvarintLen(uint64(r.Revision))
	case StreamPut:
		n += bytesLen(len(r.Value))
	}
	if r.HasPrev && r.Op != StreamGet {
		n += uvarintLen(uint64(r.PrevRevision))
	}
	if hasLease {
		n += uvarintLen(uint64(r.LeaseID))
	}
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, r.ID)
	b = append(b, byte(r.Op), flags)
	b = appendBinBytes(b, r.Key)
	switch r.Op {
	case StreamGet:
		b = binary.AppendUvarint(b, uint64(r.Revision))
	case StreamPut:
		b = appendBinBytes(b, r.Value)
	}
	if r.HasPrev && r.Op != StreamGet {
		b = binary.AppendUvarint(b, uint64(r.PrevRevision))
	}
	if hasLease {
		b = binary.AppendUvarint(b, uint64(r.LeaseID))
	}
	return b
}

// AppendStreamResponse appends r as one frame (length prefix included).
func AppendStreamResponse(b []byte, r *StreamResponse) []byte {
	if r.Op == StreamWatch && r.Err == nil {
		return appendFramed(b, appendWatchResponse(nil, r))
	}
	if (isLeaseOp(r.Op) || r.Op == StreamTxn) && r.Err == nil {
		body := binary.AppendUvarint(nil, r.ID)
		body = append(body, byte(r.Op), 0)
		if r.Op == StreamTxn {
			return appendFramed(b, appendTxnResponse(body, r))
		}
		return appendFramed(b, appendLeaseResponse(body, r))
	}
	n := uvarintLen(r.ID) + 2
	if r.Err != nil {
		n += uvarintLen(uint64(r.Err.Code)) + bytesLen(len(r.Err.Reason)) + bytesLen(len(r.Err.Message))
	} else {
		n += uvarintLen(uint64(r.Revision))
		switch r.Op {
		case StreamGet:
			n += uvarintLen(uint64(r.KV.CreateRevision)) + uvarintLen(uint64(r.KV.ModRevision)) +
				uvarintLen(uint64(r.KV.Version)) + bytesLen(len(r.KV.Value))
		case StreamDelete:
			n += uvarintLen(uint64(r.Deleted))
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	b = binary.AppendUvarint(b, r.ID)
	if r.Err != nil {
		b = append(b, byte(r.Op), 1)
		b = binary.AppendUvarint(b, uint64(r.Err.Code))
		b = appendBinBytes(b, []byte(r.Err.Reason))
		return appendBinBytes(b, []byte(r.Err.Message))
	}
	b = append(b, byte(r.Op), 0)
	b = binary.AppendUvarint(b, uint64(r.Revision))
	switch r.Op {
	case StreamGet:
		b = binary.AppendUvarint(b, uint64(r.KV.CreateRevision))
		b = binary.AppendUvarint(b, uint64(r.KV.ModRevision))
		b = binary.AppendUvarint(b, uint64(r.KV.Version))
		b = appendBinBytes(b, r.KV.Value)
	case StreamDelete:
		b = binary.AppendUvarint(b, uint64(r.Deleted))
	}
	return b
}

// ErrStreamFrameTooLarge is returned by ReadStreamFrame for a frame longer than its
// limit; the frame's bytes are still unread.
type ErrStreamFrameTooLarge struct{ Size uint64 }

func (e *ErrStreamFrameTooLarge) Error() string {
	return fmt.Sprintf("api: stream frame of %d bytes is over the limit", e.Size)
}

// streamFrameChunk is how much of a frame's body ReadStreamFrame allocates ahead of
// the bytes that arrived.
const streamFrameChunk = 64 << 10

// ReadStreamFrame reads one frame body of at most max bytes into a new slice. A
// longer frame returns *ErrStreamFrameTooLarge having consumed only its length.
//
// The body's buffer grows as its bytes arrive, at most streamFrameChunk ahead of
// them: a peer that announces a large frame and sends little costs little (250
// streams announcing 8 MiB each no longer take 2 GB before a byte of them arrives).
func ReadStreamFrame(br *bufio.Reader, max int) ([]byte, error) {
	n, err := ReadStreamFrameLen(br, max)
	if err != nil {
		return nil, err
	}
	return ReadStreamFrameBody(br, n)
}

// ReadStreamFrameLen reads a frame's length, at most max (*ErrStreamFrameTooLarge
// otherwise, its body unread): a server takes the body's bytes in flight before it
// reads them (ReadStreamFrameBody).
func ReadStreamFrameLen(br *bufio.Reader, max int) (int, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, err
		}
		return 0, fmt.Errorf("%w: frame length: %v", ErrBadStreamFrame, err)
	}
	if n > uint64(max) {
		return 0, &ErrStreamFrameTooLarge{Size: n}
	}
	return int(n), nil
}

// ReadStreamFrameBody reads the n bytes of a frame's body (ReadStreamFrameLen) into
// a new slice that grows as they arrive (see ReadStreamFrame).
func ReadStreamFrameBody(br *bufio.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, streamFrameChunk))
	for len(b) < n {
		k := min(n-len(b), streamFrameChunk)
		b = slices.Grow(b, k) // at least doubles when it grows: O(n) copying in all
		got, err := io.ReadFull(br, b[len(b):len(b)+k])
		b = b[:len(b)+got]
		if err != nil {
			return nil, fmt.Errorf("%w: frame of %d bytes: %v", ErrBadStreamFrame, n, io.ErrUnexpectedEOF)
		}
	}
	return b, nil
}

// DecodeStreamRequest decodes a request frame body. Key and Value alias body. When
// the id could be read but the rest is malformed, r.ID is set and the error wraps
// ErrBadStreamFrame; the server answers that id with a 400.
func DecodeStreamRequest(body []byte, r *StreamRequest) error {
	*r = StreamRequest{}
	d := newBinDecoder(body, ErrBadStreamFrame)
	r.ID = d.Uvarint("request id")
	if d.Err() != nil {
		return d.Err()
	}
	op, flags := StreamOp(d.Uint8("op")), d.Uint8("flags")
	r.Op = op
	r.Key = d.Bytes("key", noMax)
	switch {
	case d.Err() != nil:
	case op == StreamWatch, op == StreamWatchCancel:
		decodeWatchRequest(d, flags, r)
	case isLeaseOp(op):
		decodeLeaseRequest(d, flags, r)
	case op == StreamTxn:
		decodeTxnRequest(d, flags, r)
	case flags&^(StreamFlagSerializable|StreamFlagPrev|StreamFlagLease) != 0:
		d.Fail("unknown flags %#x", flags)
	case op == StreamGet:
		if flags&(StreamFlagPrev|StreamFlagLease) != 0 {
			d.Fail("a get has no prev_revision and no lease")
		}
		r.Serializable = flags&StreamFlagSerializable != 0
		r.Revision = d.int("revision")
	case op == StreamPut, op == StreamDelete:
		if flags&StreamFlagSerializable != 0 {
			d.Fail("only a get is serializable")
		}
		if op == StreamPut {
			if r.Value = d.Bytes("value", noMax); r.Value == nil {
				r.Value = []byte{}
			}
		}
		if flags&StreamFlagPrev != 0 {
			r.HasPrev, r.PrevRevision = true, d.int("prev_revision")
		}
		if flags&StreamFlagLease != 0 {
			if op != StreamPut {
				d.Fail("only a put attaches a lease")
			}
			r.HasLease, r.LeaseID = true, d.int("lease id")
		}
	default:
		d.Fail("unknown op %d", byte(op))
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("request %d: %w", r.ID, err)
	}
	return nil
}

// DecodeStreamResponse decodes a response frame body. A get's value is copied out of
// body; the values of watch events alias it (ReadStreamFrame returns a fresh body per
// frame).
func DecodeStreamResponse(body []byte, r *StreamResponse) error {
	*r = StreamResponse{}
	d := newBinDecoder(body, ErrBadStreamFrame)
	r.ID = d.Uvarint("response id")
	r.Op = StreamOp(d.Uint8("op"))
	switch status := d.Uint8("status"); {
	case d.Err() != nil:
	case status == 1:
		code := d.Uvarint("code")
		reason, msg := d.Bytes("reason", noMax), d.Bytes("message", noMax)
		if d.Err() == nil && (code < 100 || code > 599 || !utf8.Valid(reason) || !utf8.Valid(msg)) {
			d.Fail("bad error status %d", code)
		}
		r.Err = &Error{Code: int(code), Reason: string(reason), Message: string(msg)}
	case r.Op == StreamWatch:
		decodeWatchResponse(d, StreamWatchStatus(status), r)
	case status != 0:
		d.Fail("unknown status %d", status)
	case isLeaseOp(r.Op):
		decodeLeaseResponse(d, r)
	case r.Op == StreamTxn:
		decodeTxnResponse(d, r)
	default:
		r.Revision = d.int("revision")
		switch r.Op {
		case StreamGet:
			r.KV.CreateRevision, r.KV.ModRevision, r.KV.Version = d.int("create_revision"), d.int("mod_revision"), d.int("version")
			r.KV.Value = append([]byte{}, d.Bytes("value", noMax)...)
		case StreamPut:
		case StreamDelete:
			r.Deleted = d.int("deleted")
		default:
			d.Fail("unknown op %d", byte(r.Op))
		}
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("response %d: %w", r.ID, err)
	}
	return nil
}

// appendFramed appends body with its length prefix.
func appendFramed(b, body []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

func watchFlags(r *StreamRequest) byte {
	var flags byte
	if r.Serializable {
		flags |= StreamFlagSerializable
	}
	if r.Prefix {
		flags |= StreamFlagPrefix
	}
	if r.PrevKV {
		flags |= StreamFlagPrevKV
	}
	if r.RequireLeader {
		flags |= StreamFlagRequireLeader
	}
	return flags
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func bytesLen(n int) int { return uvarintLen(uint64(n)) + n }
