package migrate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// BenchmarkMigrate100k migrates 100,000 v1 objects into v2 on a real one-node Raft
// cluster (rafttest: WAL on the temp dir's disk, fsync per batch) at unlimited rate,
// while 4 clients write keys outside the resource, one write at a time each. It reports
// the migration's speed and the clients' write p99 before and during it:
//
//	objects/s      objects scanned and rewritten per second of the migration
//	p99-before-ms  client write p99 over 2 s with no migration
//	p99-during-ms  client write p99 while the migration runs
//	p99-ratio      during / before (goal ≤ 1.3)
//
// Run it alone: go test ./migrate/ -run '^$' -bench Migrate100k -benchtime 1x
func BenchmarkMigrate100k(b *testing.B) { benchmarkMigrate(b, 100_000, 4, -1) }

// BenchmarkMigrate100kRate5000 is the same at a rate of 5,000 objects/s (the default
// is 500): what a bounded migration costs the clients.
func BenchmarkMigrate100kRate5000(b *testing.B) { benchmarkMigrate(b, 100_000, 4, 5000) }

// BenchmarkMigrate10k is the same with 10,000 objects (a quicker check).
func BenchmarkMigrate10k(b *testing.B) { benchmarkMigrate(b, 10_000, 4, -1) }

func benchmarkMigrate(b *testing.B, n, clients, rate int) {
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		f := newFixture(b)
		f.seed(n)
		before := f.clientLatencies(clients, func(ctx context.Context) { sleepCtx(ctx, 2*time.Second) })
		m := f.migrator(Config{})
		m.cfg.Rate = rate
		m.setRate(rate)
		var took time.Duration
		b.StartTimer()
		during := f.clientLatencies(clients, func(ctx context.Context) {
			start := time.Now()
			f.stepUntil(m, StateSucceeded)
			took = time.Since(start)
		})
		b.StopTimer()
		st := f.status()
		if st.Migrated != int64(n) || st.Scanned != int64(n) {
			b.Fatalf("status %+v: want %d rewritten", st, n)
		}
		pb, pd := p99(before), p99(during)
		b.ReportMetric(float64(n)/took.Seconds(), "objects/s")
		b.ReportMetric(ms(pb), "p99-before-ms")
		b.ReportMetric(ms(pd), "p99-during-ms")
		b.ReportMetric(float64(pd)/float64(pb), "p99-ratio")
		b.Logf("%d objects in %v (%.0f objects/s); client writes: %d before, p99 %v; %d during, p99 %v",
			n, took.Round(time.Millisecond), float64(n)/took.Seconds(), len(before), pb, len(during), pd)
	}
}

// seed stores n v1 objects, 126 to a transaction.
func (f *fixture) seed(n int) {
	for i := 0; i < n; {
		var ops []fsm.Op
		for ; i < n && len(ops) < fsm.MaxTxnOps-2; i++ {
			name := fmt.Sprintf("o%07d", i)
			ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: []byte(f.res.Prefix + name), Value: []byte(v1obj(name, i)),
				Encoding: "apps/widgets/v1"})
		}
		res, err := f.n.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops}})
		if err != nil || res.Err != nil {
			f.t.Fatalf("seed: %v %v", err, res.Err)
		}
	}
}

// clientLatencies runs clients writers, one write at a time each, for as long as
// during runs, and returns every write's latency.
func (f *fixture) clientLatencies(clients int, during func(ctx context.Context)) []time.Duration {
	return applyLatencies(f.n, clients, during, func(c, i int) *fsm.Command {
		return &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{
			Type: fsm.OpPut, Key: []byte(fmt.Sprintf("clients/%d/%d", c, i%1000)), Value: []byte("some client value")}}}}
	})
}

// applyLatencies runs clients writers on n, one command at a time each (command
// c's i-th is cmd(c, i)), for as long as during runs, and returns every command's
// latency; a writer stops at its first failure.
func applyLatencies(n *raft.Node, clients int, during func(ctx context.Context), cmd func(c, i int) *fsm.Command) []time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	lat := make([][]time.Duration, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				command := cmd(c, i)
				start := time.Now()
				if _, err := n.Apply(ctx, command); err != nil {
					return
				}
				lat[c] = append(lat[c], time.Since(start))
			}
		}()
	}
	during(ctx)
	cancel()
	wg.Wait()
	return slices.Concat(lat...)
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
