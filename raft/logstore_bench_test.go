package raft

import (
	"path/filepath"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/keel-kv/keel/raft/wal"
)

// The StoreLogs benchmarks compare keel's segment WAL (raft/wal) with raft-boltdb v2,
// keel's log before it, on a real directory with real fsyncs. Each op is one
// StoreLogs call of n entries of 256-byte commands appended to the log; entries/s is
// the write throughput of one writer. (A third candidate, cockroachdb/pebble v2, was
// measured the same way and dropped: bench/README.md has its numbers; its store lived
// in raft/pebblelog until commit 0df7a62.)
//
//	go test -run '^$' -bench StoreLogs -benchtime 2s -count 3 ./raft/

type closingLogStore interface {
	hraft.LogStore
	Close() error
}

var benchStores = []struct {
	name string
	open func(b *testing.B, dir string) closingLogStore
}{
	{"wal", func(b *testing.B, dir string) closingLogStore {
		s, err := wal.Open(filepath.Join(dir, "wal"))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
	{"bolt", func(b *testing.B, dir string) closingLogStore {
		s, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}},
}

func benchStoreLogs(b *testing.B, n int) {
	for _, st := range benchStores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b, b.TempDir())
			defer s.Close()
			cmd := make([]byte, 256)
			for i := range cmd {
				cmd[i] = byte(i * 7)
			}
			now := time.Now()
			batch := make([]*hraft.Log, n)
			next := uint64(1)
			b.SetBytes(int64(n * len(cmd)))
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				for i := range batch {
					batch[i] = &hraft.Log{Index: next, Term: 1, Type: hraft.LogCommand, Data: cmd, AppendedAt: now}
					next++
				}
				if err := s.StoreLogs(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "entries/s")
		})
	}
}

func BenchmarkStoreLogs1(b *testing.B)  { benchStoreLogs(b, 1) }
func BenchmarkStoreLogs16(b *testing.B) { benchStoreLogs(b, 16) }
func BenchmarkStoreLogs64(b *testing.B) { benchStoreLogs(b, 64) }
