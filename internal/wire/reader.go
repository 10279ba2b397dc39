// Package wire reads keel's binary encodings: one sticky-error byte reader for every
// decoder of untrusted bytes (fsm commands, results and snapshots, gossip metadata, the
// binary list and stream frames of kv/api). It knows no format: each decoder keeps its
// format written down next to it and uses a Reader to take the bytes apart.
//
// A Reader never panics and never allocates more than the input justifies: a length or
// count is checked against the bytes left (or, on a stream, against a maximum, and read
// as the data arrives) before anything is allocated for it.
package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Reader reads fixed-width big-endian integers, uvarints, varints and uvarint-prefixed
// byte strings from a byte slice or a stream. The first problem sticks: it is kept in
// Err, every later read returns a zero value, and a decoder checks once at the end.
// Errors wrap the sentinel given to the constructor, so callers match them with
// errors.Is. A Reader is not safe for concurrent use.
type Reader struct {
	b   []byte        // slice mode: the unread input
	src *bufio.Reader // stream mode; nil in slice mode
	sum io.Writer     // stream mode: sees every byte consumed (a checksum), or nil
	bad error
	err error
	// canonical: a uvarint must be in its shortest form.
	canonical bool
}

// NewReader reads b. Byte strings it returns alias b. Errors wrap bad.
func NewReader(b []byte, bad error) *Reader { return &Reader{b: b, bad: bad} }

// NewStreamReader reads r, writing every byte it consumes to sum when sum is not nil
// (a running checksum). Byte strings it returns are copies. Errors wrap bad.
func NewStreamReader(r *bufio.Reader, bad error, sum io.Writer) *Reader {
	return &Reader{src: r, sum: sum, bad: bad}
}

// Canonical makes the reader refuse varints that are not in their shortest form (for
// formats that promise one encoding per value), and returns it.
func (r *Reader) Canonical() *Reader {
	r.canonical = true
	return r
}

// Err is the first problem met, or nil.
func (r *Reader) Err() error { return r.err }

// Fail records a problem (unless one is recorded already): the error wraps the
// reader's sentinel and says format, args. Later reads return zero values.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", r.bad, fmt.Sprintf(format, args...))
	}
	r.b = nil
}

// Len is the number of unread bytes in slice mode (0 on a stream or after an error).
func (r *Reader) Len() int { return len(r.b) }

// Finish returns Err, or an error if unread bytes remain (slice mode).
func (r *Reader) Finish() error {
	if r.err == nil && len(r.b) > 0 {
		r.Fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

// next consumes n bytes: a subslice of the input in slice mode, a new slice on a
// stream. n must be small enough to allocate (callers check it).
func (r *Reader) next(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if r.src == nil {
		if len(r.b) < n {
			r.Fail("truncated %s", what)
			return nil
		}
		p := r.b[:n:n]
		r.b = r.b[n:]
		return p
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r.src, p); err != nil {
		r.Fail("truncated %s", what)
		return nil
	}
	r.consumed(p)
	return p
}

func (r *Reader) consumed(p []byte) {
	if r.sum != nil {
		r.sum.Write(p)
	}
}

// Raw reads exactly n bytes (a magic number, say); n must be small, as it is allocated
// on a stream before the bytes arrive.
func (r *Reader) Raw(what string, n int) []byte { return r.next(n, what) }

// Uint8 reads one byte.
func (r *Reader) Uint8(what string) byte {
	if r.src != nil {
		if r.err != nil {
			return 0
		}
		c, err := r.src.ReadByte()
		if err != nil {
			r.Fail("truncated %s", what)
			return 0
		}
		r.consumed([]byte{c})
		return c
	}
	if p := r.next(1, what); p != nil {
		return p[0]
	}
	return 0
}

// Uint32 reads a big-endian uint32.
func (r *Reader) Uint32(what string) uint32 {
	if p := r.next(4, what); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

// Uint64 reads a big-endian uint64.
func (r *Reader) Uint64(what string) uint64 {
	if p := r.next(8, what); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// byteReader adapts a stream-mode Reader to io.ByteReader for binary.ReadUvarint.
type byteReader struct{ r *Reader }

func (b byteReader) ReadByte() (byte, error) {
	c, err := b.r.src.ReadByte()
	if err == nil {
		b.r.consumed([]byte{c})
	}
	return c, err
}

var errOverlong = errors.New("not in shortest form")

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint(what string) uint64 {
	return readVarint(r, what, binary.ReadUvarint, binary.Uvarint)
}

// Varint reads a signed (zig-zag) varint.
func (r *Reader) Varint(what string) int64 {
	return readVarint(r, what, binary.ReadVarint, binary.Varint)
}

// readVarint reads a varint of either kind: from the stream with read, from the slice
// with parse.
func readVarint[T uint64 | int64](r *Reader, what string, read func(io.ByteReader) (T, error), parse func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	if r.src != nil {
		v, err := read(byteReader{r})
		if err != nil {
			r.Fail("bad %s", what)
			return 0
		}
		return v
	}
	v, n := parse(r.b)
	switch {
	case n == 0:
		r.Fail("truncated %s", what)
		return 0
	case n < 0:
		r.Fail("bad %s: overflows 64 bits", what)
		return 0
	case r.canonical && n > 1 && r.b[n-1] == 0:
		r.Fail("bad %s: %v", what, errOverlong)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Count reads an element count and checks it against the bytes left, given that each
// element takes at least minSize bytes (slice mode), so hostile input cannot make the
// decoder allocate much.
func (r *Reader) Count(what string, minSize int) int {
	n := r.Uvarint(what)
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)/max(minSize, 1)) {
		r.Fail("%s %d exceeds the %d bytes left", what, n, len(r.b))
		return 0
	}
	return int(n)
}

// streamChunk: a stream's byte string longer than this grows as the data arrives, so a
// lying length costs nothing.
const streamChunk = 64 << 10

// Bytes reads a uvarint length and that many bytes; a length over max is an error. An
// empty string reads as nil.
func (r *Reader) Bytes(what string, max uint64) []byte {
	n := r.Uvarint(what)
	if r.err != nil {
		return nil
	}
	switch {
	case n > max:
		r.Fail("%s of %d bytes exceeds %d", what, n, max)
		return nil
	case n == 0:
		return nil
	case r.src == nil && n > uint64(len(r.b)):
		r.Fail("%s of %d bytes, %d left", what, n, len(r.b))
		return nil
	case r.src == nil || n <= streamChunk:
		return r.next(int(n), what)
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r.src, int64(n)); err != nil {
		r.Fail("truncated %s", what)
		return nil
	}
	p := buf.Bytes()
	r.consumed(p)
	return p
}
