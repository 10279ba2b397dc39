package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// The request path alone — Go client, loopback TCP, kv.Server — over an unreplicated
// store (kvtest), with 64 goroutines per core writing or reading 256-byte values: what a
// single-key request costs in CPU over HTTP/1.1 and over the stream protocol. The
// replicated path adds Raft on top (raft's BenchmarkClusterPut, bench/ for the full
// comparison with etcd).

func benchmarkRequests(b *testing.B, stream, write, txn bool) {
	f := newFixture(b)
	// The client's own transport (the fixture's counts requests over Go's default
	// one, which keeps 2 idle connections per host: 128 workers would measure dials).
	c, err := client.New([]string{strings.TrimPrefix(f.url, "http://")}, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if stream {
		c = f.streamClient(b, f.url)
	}
	ctx := context.Background()
	val := make([]byte, 256)
	for i := range 1000 {
		if _, err := c.Put(ctx, fmt.Sprintf("k%07d", i), val); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("k%07d", n.Add(1)%1000)
			var err error
			switch {
			case txn:
				_, err = c.Txn(ctx, &api.TxnRequest{
					Compare: []api.Compare{{Key: key, Target: api.TargetExists, Result: api.ResultEqual, Int: 1}},
					Success: []api.Op{{Type: api.OpPut, Key: key, Value: val}}})
			case write:
				_, err = c.Put(ctx, key, val)
			default:
				_, err = c.Get(ctx, key)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkPutHTTP(b *testing.B)   { benchmarkRequests(b, false, true, false) }
func BenchmarkPutStream(b *testing.B) { benchmarkRequests(b, true, true, false) }
func BenchmarkGetHTTP(b *testing.B)   { benchmarkRequests(b, false, false, false) }
func BenchmarkGetStream(b *testing.B) { benchmarkRequests(b, true, false, false) }

// A guarded put (the key exists → put it), the shape of a compare-and-swap.
func BenchmarkTxnHTTP(b *testing.B)   { benchmarkRequests(b, false, true, true) }
func BenchmarkTxnStream(b *testing.B) { benchmarkRequests(b, true, true, true) }
