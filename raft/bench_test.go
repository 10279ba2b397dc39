package raft

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// benchCluster is a 3-node cluster on loopback with real logs (raft/wal: one fdatasync
// per batch).
func benchCluster(b *testing.B) *testCluster { return newCluster(b, 3, nil) }

// BenchmarkClusterPut measures replicated writes/s: 256-byte values from 64 concurrent
// clients spread over all three nodes (followers forward), so many writes share one
// fsync through raft's batching.
func BenchmarkClusterPut(b *testing.B) {
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprint("clients=", clients), func(b *testing.B) {
			c := benchCluster(b)
			b.ResetTimer()
			_, elapsed := runWriters(b, clients, func(w int) *Node { return c.nodes[w%3] })
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
		})
	}
}

// runWriters has clients goroutines put b.N 256-byte values between them, client w
// through node(w), and returns each put's latency as its client saw it and the time
// they all took.
func runWriters(b *testing.B, clients int, node func(w int) *Node) (lat []time.Duration, elapsed time.Duration) {
	val := string(make([]byte, 256))
	lats := make([][]time.Duration, clients)
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := node(w)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t0 := time.Now()
				if _, err := n.Apply(context.Background(), putCmd(fmt.Sprintf("%08d", i%100000), val)); err != nil {
					b.Error(err)
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	return slices.Concat(lats...), time.Since(start)
}

// BenchmarkClusterLinearizableRead measures read-index reads from 64 concurrent
// clients on all nodes (VerifyLeader rounds are shared).
func BenchmarkClusterLinearizableRead(b *testing.B) {
	c := benchCluster(b)
	lead := c.leader()
	if _, err := c.nodes[lead].Apply(context.Background(), putCmd("k", "v")); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := c.nodes[w%3]
			for next.Add(1) <= int64(b.N) {
				v, err := n.View(context.Background(), fsm.Linearizable)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := v.Get([]byte("k"), 0); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reads/s")
}
