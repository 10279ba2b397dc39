package httpapi

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// heapInUse is the heap and stack memory in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// stalledBodies opens conns connections to addr, on each a request of method on path
// announcing a body of size bytes and sending part of it, and waits up to wait for
// their answers; it returns how many were answered 429. The connections stay open
// until the test ends.
func stalledBodies(t *testing.T, addr, method, path string, conns, size, part int, wait time.Duration) (refused int) {
	t.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	body := make([]byte, part)
	for i := range conns {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(wait))
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(c, "%s %s%d HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", method, path, i, size)
			go c.Write(body) // a refused request's body is not read
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusTooManyRequests {
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(n.Load())
}

// The HTTP door holds a client to its request bytes in flight (the core's
// MaxRequestBytesInFlightPerClient), counted from each body's Content-Length before it
// is read: 100 PUTs announcing 1 MiB and sending 512 KiB each hold at most the
// client's 4 MiB (4 requests); the others are answered 429 at once (kill: no byte
// budget, the door before: every PUT is read, 100 × 512 KiB held, none refused).
func TestRequestBytesInFlightBounded(t *testing.T) {
	const conns, size, part = 100, 1 << 20, 512 << 10
	_, addr := serveReal(t, func(c *kv.Config) {
		c.MaxValueBytes, c.MaxTxnBodyBytes = size, size
		c.MaxRequestBytesInFlightPerClient = 4 << 20
	})
	heap := heapInUse()
	refused := stalledBodies(t, addr, http.MethodPut, "/v1/kv/k", conns, size, part, 3*time.Second)
	grew := heapInUse() - heap
	t.Logf("%d PUTs announcing %d KiB, %d KiB sent each: %d refused, %+d KiB heap and stacks", conns, size>>10, part>>10, refused, grew>>10)
	const bound = 16 << 20 // 4 bodies, 100 connections' buffers
	if refused < conns-4 || grew > bound {
		t.Fatalf("%d PUTs announcing %d KiB each: %d refused, %d MiB more heap; want at least %d refused and at most %d MiB",
			conns, size>>10, refused, grew>>20, conns-4, bound>>20)
	}
}

// The stream protocol holds a client to the same bytes in flight, from each frame's
// length before its body is read: 100 connections, each announcing a 1 MiB frame and
// sending 512 KiB of it, hold at most the client's 4 MiB (kill: the frame's body read
// before its bytes are taken, the door before — 100 × 512 KiB held until the frame
// timeout).
func TestStreamRequestBytesInFlightBounded(t *testing.T) {
	const conns, size, part = 100, 1 << 20, 512 << 10
	_, addr := serveReal(t, func(c *kv.Config) {
		c.MaxValueBytes, c.MaxTxnBodyBytes = size, size
		c.MaxRequestBytesInFlightPerClient = 4 << 20
	})
	frame := binary.AppendUvarint(nil, size)
	frame = binary.AppendUvarint(frame, 1) // the request's id; the rest never comes whole
	frame = append(frame, make([]byte, part)...)
	heap := heapInUse()
	for range conns {
		c, _ := kvtest.RawStream(t, "http://"+addr, "")
		go c.Write(frame)
	}
	time.Sleep(time.Second) // the bytes arrive
	grew := heapInUse() - heap
	t.Logf("%d stream frames announcing %d KiB, %d KiB sent each: %+d KiB heap and stacks", conns, size>>10, part>>10, grew>>10)
	const bound = 16 << 20 // 4 frames, 100 connections' buffers
	if grew > bound {
		t.Fatalf("%d stream frames announcing %d KiB each: %d MiB more heap; want at most %d MiB", conns, size>>10, grew>>20, bound>>20)
	}
}
