package etcdv3

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/net/http2"

	"github.com/keel-kv/keel/kv"
)

// flowSender sends request messages on a rawConn as a hostile client that keeps to
// HTTP/2 flow control would: each stream's and the connection's window, grown by the
// server's WINDOW_UPDATEs. A goroutine reads the server's frames until the
// connection closes.
type flowSender struct {
	r       *rawConn
	mu      sync.Mutex
	conn    int64            // the connection's send window
	initial int64            // a new stream's send window (SETTINGS_INITIAL_WINDOW_SIZE)
	window  map[uint32]int64 // each stream's send window
	ended   map[uint32]bool  // streams the server ended or reset
}

func newFlowSender(r *rawConn) *flowSender {
	f := &flowSender{r: r, conn: 65535, initial: 65535, window: map[uint32]int64{}, ended: map[uint32]bool{}}
	go f.read()
	return f
}

func (f *flowSender) read() {
	for {
		fr, err := f.r.fr.ReadFrame()
		if err != nil {
			return
		}
		f.mu.Lock()
		switch fr := fr.(type) {
		case *http2.SettingsFrame:
			if !fr.IsAck() {
				if v, ok := fr.Value(http2.SettingInitialWindowSize); ok {
					for id := range f.window {
						f.window[id] += int64(v) - f.initial
					}
					f.initial = int64(v)
				}
				f.r.wmu.Lock()
				f.r.fr.WriteSettingsAck()
				f.r.wmu.Unlock()
			}
		case *http2.WindowUpdateFrame:
			if fr.StreamID == 0 {
				f.conn += int64(fr.Increment)
			} else {
				f.window[fr.StreamID] += int64(fr.Increment)
			}
		case *http2.RSTStreamFrame:
			f.ended[fr.StreamID] = true
		case *http2.MetaHeadersFrame:
			if fr.StreamEnded() {
				f.ended[fr.StreamID] = true
			}
		}
		f.mu.Unlock()
	}
}

// announce opens calls of method, each announcing a message of size bytes, and sends
// the first part bytes of each (less where the server ends the call), keeping to the
// windows; it stops when nothing moved for a second. It returns the streams the
// server ended.
func (f *flowSender) announce(t *testing.T, method string, calls, size, part int) (ended int) {
	t.Helper()
	sent := map[uint32]int{}
	var ids []uint32
	for range calls {
		id, err := f.r.callBlock(headerBlock(method, 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.window[id] += f.initial
		f.mu.Unlock()
		ids = append(ids, id)
		sent[id] = -5 // the prefix first
	}
	chunk := make([]byte, 16384)
	for idle := time.Now(); time.Since(idle) < time.Second; {
		moved := false
		for _, id := range ids {
			f.mu.Lock()
			n := min(int64(len(chunk)), f.conn, f.window[id], int64(part-sent[id]))
			if f.ended[id] {
				n = 0
			}
			f.conn -= max(n, 0)
			f.window[id] -= max(n, 0)
			f.mu.Unlock()
			if n <= 0 {
				continue
			}
			b := chunk[:n]
			if sent[id] < 0 {
				b[0] = 0
				binary.BigEndian.PutUint32(b[1:5], uint32(size))
			}
			f.r.wmu.Lock()
			err := f.r.fr.WriteData(id, false, b)
			f.r.wmu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			clear(b[:5])
			sent[id] += int(n)
			moved = true
		}
		if moved {
			idle = time.Now()
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if f.ended[id] {
			ended++
		}
	}
	return ended
}

// The etcd door holds a client to its request bytes in flight (the core's
// MaxRequestBytesInFlightPerClient), counted as each message's prefix announces its
// length: a client that opens 300 Puts on one connection, each announcing 2 MiB and
// sending 512 KiB of it, holds at most its budget (8 MiB here: 4 calls), and every
// call over it is refused at its prefix (kill: no metering, the door before: 300 ×
// 512 KiB = 150 MiB held, every call waiting for the rest of its message).
func TestEtcdRequestBytesInFlightBounded(t *testing.T) {
	const calls, size, part = 300, 2 << 20, 512 << 10
	cfg := kv.DefaultConfig()
	cfg.MaxValueBytes, cfg.MaxTxnBodyBytes = 1<<20, 2<<20
	cfg.MaxRequestBytesInFlightPerClient = 8 << 20
	budget := int(cfg.MaxRequestBytesInFlightPerClient) / size
	d := newFloodDoor(t, cfg)
	r := dialRaw(t, d.addr)
	r.c.SetDeadline(time.Now().Add(2 * time.Minute))
	f := newFlowSender(r)
	before, heap := settled(), inUse()
	ended := f.announce(t, pb.KV_Put_FullMethodName, calls, size, part)
	grew, heapGrew := settled()-before, inUse()-heap
	t.Logf("%d Puts announcing %d KiB, sending %d KiB each: %d refused, %+d goroutines, %+d KiB heap and stacks",
		calls, size>>10, part>>10, ended, grew, heapGrew>>10)
	const bound = 24 << 20 // the 8 MiB budget, 300 streams' first 64 KiB window, gRPC's buffers
	if ended < calls-budget || heapGrew > bound {
		t.Fatalf("%d Puts announcing %d KiB each, sending %d KiB: %d refused, %d MiB more heap and stacks; want at least %d refused and at most %d MiB",
			calls, size>>10, part>>10, ended, heapGrew>>20, calls-budget, bound>>20)
	}
	// The connection's end gives its bytes back: the client's next Put is served.
	r.c.Close()
	kvc := pb.NewKVClient(d.dial(t))
	value := make([]byte, 512<<10)
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = kvc.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: value})
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("a Put once the attacking connection closed: %v", err)
}

// The etcd door's JSON gateway holds an HTTP client to the same bytes in flight, from
// each body's Content-Length (its gRPC calls run on the in-process connection, which
// is not metered): 60 POST /v3/kv/put announcing 1 MiB, 512 KiB sent each, hold at
// most the client's 4 MiB; the others are answered 429 at once (kill: no AdmitBody in
// the gateway's handler — every body is read, 60 × 512 KiB held).
func TestGatewayRequestBytesInFlightBounded(t *testing.T) {
	const conns, size, part = 60, 1 << 20, 512 << 10
	cfg := kv.DefaultConfig()
	cfg.MaxValueBytes, cfg.MaxTxnBodyBytes = size/2, size/2
	cfg.MaxRequestBytesInFlightPerClient = 4 << 20
	d := newFloodDoor(t, cfg)
	heap := inUse()
	var refused atomic.Int64
	var wg sync.WaitGroup
	body := append([]byte(`{"key":"aw==","value":"`), bytes.Repeat([]byte("A"), part)...) // a JSON put, unfinished
	for range conns {
		c, err := net.DialTimeout("tcp", d.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(3 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(c, "POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
			go c.Write(body) // a refused request's body is not read
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusTooManyRequests {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	grew := inUse() - heap
	t.Logf("%d gateway puts announcing %d KiB, %d KiB sent each: %d refused, %+d KiB heap and stacks", conns, size>>10, part>>10, refused.Load(), grew>>10)
	const bound = 16 << 20
	if refused.Load() < conns-4 || grew > bound {
		t.Fatalf("%d gateway puts announcing %d KiB each: %d refused, %d MiB more heap; want at least %d refused and at most %d MiB",
			conns, size>>10, refused.Load(), grew>>20, conns-4, bound>>20)
	}
}
