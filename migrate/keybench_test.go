package migrate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// BenchmarkKeyCopy100k runs the copy of a key migration's phase 3 over 100,000 old
// keys on a real one-node Raft cluster (rafttest: WAL on disk) at unlimited rate, while
// 4 clients make mirrored writes of other objects (one transaction: compare the phase
// record, put the old and the new key), one at a time each. It reports:
//
//	keys/s         old keys scanned and copied per second of the copy
//	p99-before-ms  client write p99 over 2 s in phase 3 before the copy starts
//	p99-during-ms  client write p99 while the copy runs
//	p99-ratio      during / before (goal ≤ 1.3)
//
// Run it alone: go test ./migrate/ -run '^$' -bench KeyCopy100k -benchtime 1x
func BenchmarkKeyCopy100k(b *testing.B) { benchmarkKeyCopy(b, 100_000, 4, -1) }

// BenchmarkKeyCopy100kRate5000 is the same at 5,000 keys/s (the default rate is 500).
func BenchmarkKeyCopy100kRate5000(b *testing.B) { benchmarkKeyCopy(b, 100_000, 4, 5000) }

func benchmarkKeyCopy(b *testing.B, n, clients, rate int) {
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		f := newKeyFixture(b)
		f.seed(n)
		for p := 1; p <= 3; p++ {
			if err := f.advance(p); err != nil {
				b.Fatal(err)
			}
		}
		m := f.migrator()
		m.cfg.Chunk = keyChunk
		m.setRate(rate)
		before := f.mirroredLatencies(clients, func(ctx context.Context) { sleepCtx(ctx, 2*time.Second) })
		var took time.Duration
		b.StartTimer()
		during := f.mirroredLatencies(clients, func(context.Context) {
			start := time.Now()
			f.stepUntilDone(m)
			took = time.Since(start)
		})
		b.StopTimer()
		w, _ := versions.ReadKeyWork(f.view(), f.k.Name)
		if w == nil || w.State != workDone || w.Written != int64(n) || w.Left != 0 {
			b.Fatalf("copy work %+v: want %d copied, 0 left", w, n)
		}
		pb, pd := p99(before), p99(during)
		b.ReportMetric(float64(n)/took.Seconds(), "keys/s")
		b.ReportMetric(ms(pb), "p99-before-ms")
		b.ReportMetric(ms(pd), "p99-during-ms")
		b.ReportMetric(float64(pd)/float64(pb), "p99-ratio")
		b.Logf("%d keys copied in %v (%.0f keys/s); mirrored client writes: %d before, p99 %v; %d during, p99 %v",
			n, took.Round(time.Millisecond), float64(n)/took.Seconds(), len(before), pb, len(during), pd)
	}
}

// mirroredLatencies runs clients writers of phase-3 mirrored writes (names outside the
// seeded ones) for as long as during runs, and returns every write's latency.
func (f *keyFixture) mirroredLatencies(clients int, during func(ctx context.Context)) []time.Duration {
	rec, err := versions.ReadKeyPhase(f.view(), f.k.Name)
	if err != nil {
		f.t.Fatal(err)
	}
	return applyLatencies(f.n, clients, during, func(c, i int) *fsm.Command {
		name := fmt.Sprintf("client-%d-%d", c, i%1000)
		v := []byte(fmt.Sprintf(`{"apiVersion":"apps/v1","spec":{"size":%d}}`, i))
		nv, _ := f.k.ToNew(v)
		return &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
			Compares: []fsm.Compare{{Key: []byte(versions.KeyPhaseKey(f.k.Name)), Target: fsm.TargetModRevision,
				Result: fsm.CompareEqual, Int: rec.Revision}},
			Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte(f.k.From + name), Value: v},
				{Type: fsm.OpPut, Key: []byte(f.k.To + name), Value: nv}}}}
	})
}
