package etcdv3

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/keel-kv/keel/kv"
)

// TestFloodAtReportSize runs the attacks of issue #33 at the size they were reported
// at, against a door with the default configuration, and logs the goroutines and the
// memory (RSS, and heap and stacks in use) they add. It is a measurement, not a test:
// it runs only with KEEL_FLOOD set, one attack per process for a clean RSS:
//
//	KEEL_FLOOD=1 go test -count=1 -v -run 'TestFloodAtReportSize/progress$' ./kv/etcdv3/
//
// The attacker is a raw HTTP/2 client (rawConn) that ignores the server's SETTINGS,
// as a hostile client would, except for the progress flood, which needs gRPC's flow
// control and uses gRPC's client: in-process, its goroutines are a handful, and its
// memory is small next to the server's. bench/README.md holds the numbers.
func TestFloodAtReportSize(t *testing.T) {
	if os.Getenv("KEEL_FLOOD") == "" {
		t.Skip("a measurement: set KEEL_FLOOD=1 and pick one attack with -run")
	}
	for _, a := range []struct {
		name   string
		attack func(t *testing.T, d *floodDoor) string
	}{
		{"progress", floodProgress},                  // 300,000 RequestProgress never read, one stream
		{"streams-one-conn", floodStreams(1, 50000)}, // 50,000 idle Watch streams on one connection
		{"streams-50-conns", floodStreams(50, 1000)}, // 50,000 idle Watch streams over 50 connections
		{"headers", floodHeaders},                    // 60 tokenless health Watch streams, 15 MB of metadata each
		{"calls-no-body", floodCallsNoBody},          // 20 connections of 1,024 Range calls whose request never comes
		{"conns", floodConns},                        // 2,500 idle connections, the per-client maximum
		{"worst", floodWorst(0)},                     // one client's worst case: every slot of both budgets
		{"worst-15k", floodWorst(15 << 10)},          // the same, each call with 15 KiB of metadata
	} {
		t.Run(a.name, func(t *testing.T) {
			d := newFloodDoor(t, kv.DefaultConfig())
			g0, rss0, heap0 := settled(), rss(), inUse()
			what := a.attack(t, d)
			g1, rss1, heap1 := settled(), rss(), inUse()
			t.Logf("%s: goroutines %d -> %d (%+d); RSS %d -> %d MiB (%+d); heap and stacks %d -> %d MiB (%+d)",
				what, g0, g1, g1-g0, rss0>>20, rss1>>20, (rss1-rss0)>>20, heap0>>20, heap1>>20, (heap1-heap0)>>20)
		})
	}
}

// rss is the process's resident set (VmRSS), 0 when unknown.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// drain reads and drops the server's frames until the connection closes, acking its
// settings and pings, so that its writes never stall the attack (a hostile client's
// reader).
func (r *rawConn) drain() {
	go func() {
		for {
			f, err := r.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					r.wmu.Lock()
					r.fr.WriteSettingsAck()
					r.wmu.Unlock()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					r.wmu.Lock()
					r.fr.WritePing(true, f.Data)
					r.wmu.Unlock()
				}
			}
		}
	}()
}

// rawFlood is a raw connection whose server's frames are drained; nil when the
// server refused it (the client's budget is spent).
func rawFlood(t *testing.T, d *floodDoor) *rawConn {
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &rawConn{c: c, fr: http2.NewFramer(c, c), next: 1}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return nil
	}
	if err := r.fr.WriteSettings(); err != nil {
		return nil
	}
	r.drain()
	return r
}

func floodProgress(t *testing.T, d *floodDoor) string {
	const n = 300000
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := pb.NewWatchClient(d.dial(t)).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	createWatch(t, stream, "app/a")
	for i := range n {
		if err := stream.Send(progressRequest); err != nil {
			t.Fatalf("progress request %d: %v", i, err)
		}
	}
	return fmt.Sprintf("%d RequestProgress on one Watch stream, never read", n)
}

func floodStreams(conns, perConn int) func(t *testing.T, d *floodDoor) string {
	return func(t *testing.T, d *floodDoor) string {
		block, refused := headerBlock(pb.Watch_Watch_FullMethodName, 0), 0
		for range conns {
			r := rawFlood(t, d)
			if r == nil {
				refused++
				continue
			}
			for range perConn {
				if _, err := r.callBlock(block, nil); err != nil {
					refused++ // the server closed it: refused at accept, the client's budget spent
					break
				}
			}
		}
		return fmt.Sprintf("%d idle Watch streams on %d connection(s) (%d connections refused)", conns*perConn, conns, refused)
	}
}

func floodHeaders(t *testing.T, d *floodDoor) string {
	const n, pad = 60, 15 << 20
	block, refused := headerBlock(healthpb.Health_Watch_FullMethodName, pad), 0 // one block for all: the client's 15 MB
	for range n {
		r := rawFlood(t, d)
		if r == nil {
			refused++
			continue
		}
		if _, err := r.callBlock(block, &healthpb.HealthCheckRequest{}); err != nil {
			refused++ // the server closed the connection
		}
	}
	t.Logf("%d of %d connections closed by the server while the header block was written", refused, n)
	return fmt.Sprintf("%d tokenless health Watch streams with %d MiB of metadata each", n, pad>>20)
}

func floodCallsNoBody(t *testing.T, d *floodDoor) string {
	const conns, perConn = 20, 1024
	block := headerBlock(pb.KV_Range_FullMethodName, 0)
	for c := range conns {
		r := rawFlood(t, d)
		for i := range perConn {
			if _, err := r.callBlock(block, nil); err != nil {
				t.Fatalf("connection %d, call %d: %v", c, i, err)
			}
		}
	}
	return fmt.Sprintf("%d Range calls without their request on %d connections", conns*perConn, conns)
}

func floodConns(t *testing.T, d *floodDoor) string {
	n := kv.DefaultConfig().MaxConnsPerClient
	refused := 0
	for range n + 100 {
		if rawFlood(t, d) == nil {
			refused++
		}
	}
	return fmt.Sprintf("%d idle connections (%d refused)", n+100, refused)
}

// floodWorst takes every slot one client has: 2,500 pending calls on 3 connections
// (MaxInFlightPerClient), and the rest of its 2,500 connections and streams as idle
// Watch streams on 3 more.
func floodWorst(pad int) func(t *testing.T, d *floodDoor) string {
	return func(t *testing.T, d *floodDoor) string {
		var rs []*rawConn
		for range 6 {
			rs = append(rs, rawFlood(t, d))
		}
		calls, watches := headerBlock(pb.KV_Range_FullMethodName, pad), headerBlock(pb.Watch_Watch_FullMethodName, pad)
		for i, r := range rs {
			block := calls
			if i >= 3 {
				block = watches
			}
			for range 1000 {
				if _, err := r.callBlock(block, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		return fmt.Sprintf("3 connections of 1,000 calls without their request and 3 of 1,000 idle Watch streams, %d bytes of metadata each", pad)
	}
}
