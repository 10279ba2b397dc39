package etcdv3

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/keel-kv/keel/kv"
)

// rawConn is a bare HTTP/2 connection to the door: what a hostile client sends,
// unchecked by gRPC's client (which keeps to the server's SETTINGS).
type rawConn struct {
	c    net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex // the framer's writes: drain acks from its own goroutine
	next uint32     // the next stream ID
}

// dialRaw connects and sends the preface; the connection closes when the test ends.
func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &rawConn{c: c, fr: fr, next: 1}
}

// call starts a gRPC call of method with pad bytes of extra metadata, and sends msg
// as its request, or nothing at all when msg is nil (the call then waits for it). It
// returns the call's stream ID.
func (r *rawConn) call(method string, pad int, msg proto.Message) (uint32, error) {
	return r.callBlock(headerBlock(method, pad), msg)
}

// headerBlock is the HPACK block of a call of method with pad bytes of extra
// metadata, every field a literal (it depends on no earlier block).
func headerBlock(method string, pad int) []byte {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "keel"},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-pad", strings.Repeat("p", pad)}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
	}
	return block.Bytes()
}

// callBlock is call with its header block made.
func (r *rawConn) callBlock(b []byte, msg proto.Message) (uint32, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	id := r.next
	r.next += 2
	n := min(len(b), 16384)
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:n], EndHeaders: n == len(b)}); err != nil {
		return id, err
	}
	for b = b[n:]; len(b) > 0; b = b[n:] {
		n = min(len(b), 16384)
		if err := r.fr.WriteContinuation(id, n == len(b), b[:n]); err != nil {
			return id, err
		}
	}
	if msg == nil {
		return id, nil
	}
	body, err := proto.Marshal(msg)
	if err != nil {
		return id, err
	}
	frame := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(body)))
	return id, r.fr.WriteData(id, true, append(frame, body...))
}

// answer reads the server's frames until its verdict on stream id: served (headers
// and no error status), or refused (a reset stream, a GOAWAY, a closed connection, an
// error status).
func (r *rawConn) answer(id uint32) (served bool, how string) {
	for range 1000 {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return false, "connection: " + err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				r.wmu.Lock()
				r.fr.WriteSettingsAck()
				r.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			return false, "GOAWAY " + f.ErrCode.String()
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return false, "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if st := f.PseudoValue("status"); st != "" && st != "200" {
				return false, "HTTP status " + st
			}
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					return hf.Value == "0", "grpc-status " + hf.Value
				}
			}
			return true, "headers"
		}
	}
	return false, "no answer in 1000 frames"
}

// rawCall makes one call of method on a connection of its own, with pad bytes of
// extra metadata, and reports the server's verdict. The connection stays open until
// the test ends, so that a served stream stays held.
func rawCall(t *testing.T, addr, method string, msg proto.Message, pad int) (served bool, how string) {
	t.Helper()
	r := dialRaw(t, addr)
	id, err := r.call(method, pad, msg)
	if err != nil {
		return false, "write: " + err.Error()
	}
	return r.answer(id)
}

// The etcd door refuses a call whose metadata is over kv.MaxHeaderListBytes (16 KiB),
// tokenless health included, instead of gRPC's default of 16 MB (kill: no
// MaxHeaderListSize, the door before issue #33: a Range with 1 MiB of metadata is
// served, and each held health Watch keeps its megabyte). A call with 8 KiB of
// metadata (a long token and tracing headers) is served.
func TestEtcdHeaderListBounded(t *testing.T) {
	const held = 32
	d := newFloodDoor(t, kv.DefaultConfig())
	rangeK := &pb.RangeRequest{Key: []byte("k")}
	if served, how := rawCall(t, d.addr, pb.KV_Range_FullMethodName, rangeK, 8<<10); !served {
		t.Fatalf("Range with 8 KiB of metadata: %s, want served", how)
	}
	if served, how := rawCall(t, d.addr, pb.KV_Range_FullMethodName, rangeK, 1<<20); served {
		t.Fatalf("Range with 1 MiB of metadata: %s, want refused", how)
	}
	runtime.GC()
	before, heap := settled(), inUse()
	served := 0
	for range held {
		if ok, _ := rawCall(t, d.addr, healthpb.Health_Watch_FullMethodName, &healthpb.HealthCheckRequest{}, 1<<20); ok {
			served++
		}
	}
	grew, heapGrew := settled()-before, inUse()-heap
	t.Logf("%d health Watch streams with 1 MiB of metadata, %d served: %+d goroutines, %+d KiB heap and stacks", held, served, grew, heapGrew>>10)
	if served > 0 || heapGrew > 8<<20 {
		t.Fatalf("%d health Watch streams with 1 MiB of metadata: %d served, %d MiB more heap and stacks; want none served and at most 8 MiB",
			held, served, heapGrew>>20)
	}
}

// A unary call holds a slot of its client's requests in flight from its headers on,
// before gRPC starts its goroutine, not once its request message has arrived: a client
// that opens calls and never sends their messages holds at most MaxInFlightPerClient
// of them, and the next is refused at once (kill: the slot taken by the unary
// interceptor, the door before issue #33: 400 calls without a message held 400
// goroutines, and the call after them was served).
func TestEtcdCallsWithoutTheirRequestAreBounded(t *testing.T) {
	const perClient, calls = 50, 400
	cfg := kv.DefaultConfig()
	cfg.MaxInFlightPerClient = perClient
	d := newFloodDoor(t, cfg)
	r := dialRaw(t, d.addr)
	if id, err := r.call(healthpb.Health_Check_FullMethodName, 0, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	} else if served, how := r.answer(id); !served {
		t.Fatalf("health Check: %s, want served", how)
	}
	before := settled()
	for i := range calls {
		if _, err := r.call(pb.KV_Range_FullMethodName, 0, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	id, err := r.call(pb.KV_Range_FullMethodName, 0, &pb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	served, how := r.answer(id) // the server read every call before it
	grew := settled() - before
	t.Logf("%d calls without their request: %+d goroutines; the next call: %s", calls, grew, how)
	if served || grew > 2*perClient+20 {
		t.Fatalf("%d calls without their request, %d per client: %d more goroutines, the next call %s; want at most %d and refused",
			calls, perClient, grew, how, 2*perClient+20)
	}
}

// A call's slot goes back once its context has ended and its handler has returned,
// whichever is later: a client that resets calls whose handlers still run does not get
// their slots back early (HTTP/2's rapid reset), and a handler never starts on a slot
// given back (kill: the slot given back when the context ends).
func TestCallSlotOutlivesItsHandler(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	released := make(chan struct{})
	ctx = withCallSlot(ctx, func() { close(released) }, nil) // a second release panics
	drop, ok := holdCallSlot(ctx)
	if !ok {
		t.Fatal("a live call's handler may not hold its slot")
	}
	cancel() // the client reset the call; its handler still runs
	select {
	case <-released:
		t.Fatal("slot given back while the handler runs")
	case <-time.After(100 * time.Millisecond):
	}
	drop()
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("slot not given back once the call ended and its handler returned")
	}
	if _, ok := holdCallSlot(ctx); ok {
		t.Fatal("a handler may start on a slot given back")
	}
}
