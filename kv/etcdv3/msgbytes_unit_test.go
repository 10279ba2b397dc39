package etcdv3

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"golang.org/x/net/http2"

	"github.com/keel-kv/keel/kv"
)

// meterFixture is a meteredConn over canned client bytes, with a budget of budget
// bytes: taken and given are what it admitted and gave back.
type meterFixture struct {
	c             *meteredConn
	taken, given  int64
	refusedAdmits int
}

func newMeterFixture(budget int64) *meterFixture {
	f := &meterFixture{}
	f.c = &meteredConn{maxMsg: 8 << 20, in: h2Frames{preface: len(http2Preface)}, streams: map[uint32]*meteredStream{}}
	f.c.admit = func(n int64) (func(), error) {
		if f.taken-f.given+n > budget {
			f.refusedAdmits++
			return nil, kv.ErrTooManyRequests
		}
		f.taken += n
		return func() { f.given += n }, nil
	}
	return f
}

// feed passes b to the parser in reads of at most chunk bytes, as gRPC would read it,
// and returns the bytes gRPC would see.
func (f *meterFixture) feed(b []byte, chunk int) ([]byte, error) {
	b = bytes.Clone(b)
	for i := 0; i < len(b); i += chunk {
		f.c.mu.Lock()
		err := f.c.readFrames(b[i:min(i+chunk, len(b))])
		f.c.mu.Unlock()
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// clientBytes is a client's preface and frames: stream 1 a call whose first message,
// 50 bytes whole in a padded DATA frame, is followed by one of 1 MiB, stream 3 one of
// 2 MiB, stream 5 one of 512 KiB, each sending the first 100 bytes of its last.
func clientBytes(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString(http2Preface)
	fr := http2.NewFramer(&buf, nil)
	fr.WriteSettings()
	for _, m := range []struct {
		id   uint32
		size uint32
		pad  []byte
	}{{1, 1 << 20, make([]byte, 7)}, {3, 2 << 20, nil}, {5, 512 << 10, nil}} {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: m.id, BlockFragment: headerBlock(pbPut, 0), EndHeaders: true})
		if m.pad != nil {
			first := append(binary.BigEndian.AppendUint32([]byte{0}, 50), make([]byte, 50)...)
			fr.WriteDataPadded(m.id, false, first, m.pad)
		}
		msg := binary.BigEndian.AppendUint32([]byte{0}, m.size)
		msg = append(msg, make([]byte, 100)...)
		fr.WriteData(m.id, false, msg)
	}
	return buf.Bytes()
}

const pbPut = "/etcdserverpb.KV/Put"

// prefixLength is the length the message prefix of stream id announces in b, as gRPC
// reads it.
func prefixLength(t *testing.T, b []byte, id uint32) uint32 {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(b[len(http2Preface):]))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no DATA on stream %d: %v", id, err)
		}
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == id {
			return binary.BigEndian.Uint32(d.Data()[1:5])
		}
	}
}

// The meter reads a client's frames however they are cut into reads: with a budget of
// 3 MiB and 50 bytes, calls announcing 50 bytes (in a padded frame) then 1 MiB, and 2
// MiB, are admitted and one of 512 KiB is refused — its prefix rewritten so that gRPC refuses it — for reads of
// every size but those that split the refused prefix's length, which close the
// connection (errSplitPrefix). A stream's next message, and its end, give its bytes
// back.
func TestMeterReadsFramesAnyCut(t *testing.T) {
	in := clientBytes(t)
	splits := 0
	for chunk := 1; chunk <= len(in); chunk++ {
		f := newMeterFixture(3<<20 + 50)
		out, err := f.feed(in, chunk)
		if errors.Is(err, errSplitPrefix) && f.refusedAdmits == 1 {
			splits++ // the cut fell inside the refused prefix's length
			continue
		}
		if err != nil {
			t.Fatalf("reads of %d: %v", chunk, err)
		}
		if f.taken != 3<<20+50 || f.given != 50 || f.refusedAdmits != 1 {
			t.Fatalf("reads of %d: took %d bytes, gave back %d, %d refused; want %d, 50 and 1", chunk, f.taken, f.given, f.refusedAdmits, 3<<20+50)
		}
		for id, want := range map[uint32]uint32{1: 50, 3: 2 << 20, 5: refusedLength} {
			if got := prefixLength(t, out, id); got != want {
				t.Fatalf("reads of %d: stream %d announces %d to gRPC, want %d", chunk, id, got, want)
			}
		}
		f.c.mu.Lock()
		f.c.writeFrames(rstFrame(3))
		f.c.mu.Unlock()
		if f.given != 2<<20+50 {
			t.Fatalf("reads of %d: the server's reset of stream 3 gave back %d bytes, want %d", chunk, f.given-50, 2<<20)
		}
	}
	if splits > len(in)/10 {
		t.Fatalf("%d of %d cuts closed the connection; want at most a tenth", splits, len(in))
	}
}

// rstFrame is a RST_STREAM of stream id, as the server writes it.
func rstFrame(id uint32) []byte {
	var buf bytes.Buffer
	http2.NewFramer(&buf, nil).WriteRSTStream(id, http2.ErrCodeCancel)
	return buf.Bytes()
}

// Close gives back every stream's bytes.
func TestMeterCloseGivesBack(t *testing.T) {
	f := newMeterFixture(8 << 20)
	if _, err := f.feed(clientBytes(t), 1<<10); err != nil {
		t.Fatal(err)
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	f.c.Conn = c1
	f.c.Close()
	if f.taken != 3<<20+512<<10+50 || f.given != f.taken {
		t.Fatalf("took %d, gave back %d on Close; want %d both", f.taken, f.given, 3<<20+512<<10+50)
	}
}
