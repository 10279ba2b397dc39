package raft

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/raft/wal"
)

// The leader-write benchmarks compare the leader writing its log before it replicates
// (upstream hashicorp/raft: "serial") with writing it while it replicates (keel's
// fork, hraft.AsyncLogStore: "parallel"), on real 3-node clusters over loopback with
// real fdatasyncs, and again with 2 ms added to every fdatasync (a slower disk). Every
// client writes to the leader; latency is per write, as the client sees it.
//
//	go test -run '^$' -bench LeaderWrite -benchtime 2000x ./raft/
//
// BenchmarkLeaderWriteBaseline reports what the goal is measured against: one
// fdatasync of a small append and one loopback TCP round trip.

// serialLogs hides the log's StoreLogsAsync: the leader writes, then replicates.
type serialLogs struct{ hraft.LogStore }

func BenchmarkLeaderWrite(b *testing.B) {
	for _, disk := range []struct {
		name  string
		delay time.Duration
	}{{"disk", 0}, {"disk+2ms", 2 * time.Millisecond}} {
		for _, clients := range []int{1, 8, 64} {
			for _, mode := range []string{"serial", "parallel"} {
				name := fmt.Sprintf("%s/clients=%d/%s", disk.name, clients, mode)
				b.Run(name, func(b *testing.B) { benchLeaderWrite(b, clients, mode == "parallel", disk.delay) })
			}
		}
	}
}

// BenchmarkLeaderWriteOneNode is one client on a one-node cluster: one fdatasync and
// no round trip, so its latency less the fdatasync is keel's and raft's own cost.
func BenchmarkLeaderWriteOneNode(b *testing.B) {
	for _, delay := range []time.Duration{0, 2 * time.Millisecond} {
		b.Run(fmt.Sprint("delay=", delay), func(b *testing.B) { benchLeaderWriteNodes(b, 1, 1, true, delay) })
	}
}

func benchLeaderWrite(b *testing.B, clients int, parallel bool, delay time.Duration) {
	benchLeaderWriteNodes(b, 3, clients, parallel, delay)
}

func benchLeaderWriteNodes(b *testing.B, nodes, clients int, parallel bool, delay time.Duration) {
	c := newCluster(b, nodes, func(cfg *Config) {
		if !parallel {
			cfg.wrapLogStore = func(s hraft.LogStore) hraft.LogStore { return serialLogs{s} }
		}
		if delay > 0 { // every fdatasync takes delay longer (syncHookFS, leaderwrite_test.go)
			slow := func() error { time.Sleep(delay); return nil }
			hook := new(atomic.Pointer[func() error])
			hook.Store(&slow)
			cfg.wrapLogFS = func(fs wal.FS) wal.FS { return syncHookFS{FS: fs, hook: hook} }
		}
	})
	lead := c.nodes[c.leader()]
	val := string(make([]byte, 256))
	for i := range 50 { // warm up: connections, the first segment
		if _, err := lead.Apply(context.Background(), putCmd(fmt.Sprintf("w%d", i), val)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	lat, elapsed := runWriters(b, clients, func(int) *Node { return lead })
	b.StopTimer()
	reportPercentiles(b, lat, "")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
}

// BenchmarkLeaderWriteBaseline measures the two costs a write cannot avoid: an
// fdatasync of a 300-byte append in the directory the clusters use (t.TempDir), and a
// 300-byte TCP round trip over loopback.
func BenchmarkLeaderWriteBaseline(b *testing.B) {
	b.Run("fdatasync", func(b *testing.B) {
		f, err := wal.OSFS{}.Create(filepath.Join(b.TempDir(), "f")) // Sync is fdatasync
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 300)
		var off int64
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
			off += int64(len(buf))
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		reportPercentiles(b, lat, "")
	})
	b.Run("loopback-rtt", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			io.Copy(conn, conn)
		}()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		buf := make([]byte, 300)
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			if _, err := conn.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(conn, buf); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		reportPercentiles(b, lat, "")
	})
}

func reportPercentiles(b *testing.B, lat []time.Duration, what string) {
	if what != "" {
		what += "-"
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-"+what+"µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-"+what+"µs")
	}
}

// BenchmarkFollowerApplyLag is one client writing to the leader of an otherwise idle
// 3-node cluster, and the time from the leader's answer until a follower has applied
// the write: what a watch or a serializable read on a follower waits beyond the
// write itself. A follower learns that an entry committed from the leader's next
// AppendEntries, so the lag is how soon the leader sends one after a commit.
//
//	go test -run '^$' -bench FollowerApplyLag -benchtime 500x ./raft/
func BenchmarkFollowerApplyLag(b *testing.B) {
	c := newCluster(b, 3, nil)
	lead := c.nodes[c.leader()]
	var follower *Node
	for _, n := range c.nodes {
		if n != lead {
			follower = n
			break
		}
	}
	val := string(make([]byte, 256))
	lag := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if _, err := lead.Apply(context.Background(), putCmd(fmt.Sprintf("k%d", i%1000), val)); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		idx := lead.Raft().AppliedIndex()
		for follower.Raft().AppliedIndex() < idx {
			if time.Since(t0) > time.Second {
				b.Fatalf("the follower did not apply index %d within a second", idx)
			}
			time.Sleep(20 * time.Microsecond)
		}
		lag = append(lag, time.Since(t0))
		time.Sleep(time.Duration(i%7) * time.Millisecond) // writes at no fixed phase of the commit timer
	}
	b.StopTimer()
	reportPercentiles(b, lag, "lag")
}
