package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSummarisePercentiles(t *testing.T) {
	// 100 latencies 1..100 ms in one worker: p50 = 50 ms, p99 = 99 ms, max = 100 ms.
	var r workerResult
	for i := 100; i >= 1; i-- {
		r.lats = append(r.lats, time.Duration(i)*time.Millisecond)
	}
	start := time.Now()
	r.lastEnd = start.Add(2 * time.Second)
	st := summarise(1, start, []workerResult{r})
	if st.Ops != 100 || st.P50Ms != 50 || st.P99Ms != 99 || st.MaxMs != 100 {
		t.Errorf("ops %d p50 %.0f p99 %.0f max %.0f, want 100 50 99 100", st.Ops, st.P50Ms, st.P99Ms, st.MaxMs)
	}
	if st.OpsPerSec < 49 || st.OpsPerSec > 51 {
		t.Errorf("ops/s = %.1f, want 50", st.OpsPerSec)
	}
}

func TestRunLoadCountsErrorsApart(t *testing.T) {
	var calls atomic.Int64
	st := runLoad(context.Background(), loadSpec{clients: 4, warm: 20 * time.Millisecond, dur: 100 * time.Millisecond,
		op: func(ctx context.Context, w int, _ *rand.Rand) error {
			if calls.Add(1)%2 == 0 {
				return errors.New("boom")
			}
			time.Sleep(time.Millisecond)
			return nil
		}})
	if st.Ops == 0 || st.Errors == 0 || st.FirstErr != "boom" {
		t.Errorf("ops %d errors %d first %q, want both > 0 and boom", st.Ops, st.Errors, st.FirstErr)
	}
	if st.Seconds < 0.09 {
		t.Errorf("measured %.3fs, want >= the 0.1s run", st.Seconds)
	}
}

func TestRunLoadExtendsUntilClosed(t *testing.T) {
	ext := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(ext) })
	start := time.Now()
	runLoad(context.Background(), loadSpec{clients: 1, dur: 50 * time.Millisecond, extend: ext,
		op: func(ctx context.Context, w int, _ *rand.Rand) error { time.Sleep(time.Millisecond); return nil }})
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("run ended after %v, before extend closed at 300ms", el)
	}
}

func TestRenderTableTargets(t *testing.T) {
	cfg := defaultSuiteConfig()
	keel := &Results{Stats: map[string]Stats{"write64": {Ops: 1, OpsPerSec: 3000, P99Ms: 10, Errors: 2}},
		Metrics: map[string]float64{"compact.p99_ratio": 1.1, "rss.max_mb": 500}}
	etcd := &Results{Stats: map[string]Stats{"write64": {Ops: 1, OpsPerSec: 1000, P99Ms: 20}},
		Metrics: map[string]float64{"compact.p99_ratio": 2.0, "rss.max_mb": 400}}
	table, met, total := renderTable(cfg, []*Results{keel}, []*Results{etcd})
	// write 3×: met; p99 0.5×: met; compaction keel 1.1 ≤ 1.2: met; RSS 1.25×: not met;
	// reads, scan, the 2 lease rows and the 3 watch rows: not measured.
	if total != 12 || met != 3 {
		t.Errorf("met %d of %d, want 3 of 12\n%s", met, total, table)
	}
	if !strings.Contains(table, "| write, 64 clients (ops/s) | 3000 | 1000 | 3.00× | ≥ 1.5× | yes | 3000 | 1000 | 2 / 0 |") {
		t.Errorf("write row missing or wrong:\n%s", table)
	}
	if !strings.Contains(table, "1.25× | ≤ 1.0× | **no** |") {
		t.Errorf("RSS row should miss its target:\n%s", table)
	}
}

// TestRenderTableWorstRun: with two rounds, a target is met only if the worse round
// meets it, and the table shows every run, the spread and each run's errors.
func TestRenderTableWorstRun(t *testing.T) {
	cfg := defaultSuiteConfig()
	run := func(ops, p99 float64, errs int64) *Results {
		return &Results{Stats: map[string]Stats{"write64": {Ops: 1, OpsPerSec: ops, P99Ms: p99, Errors: errs}}, Metrics: map[string]float64{}}
	}
	// Round 1: keel 3000 vs etcd 1000 (3×); round 2: keel 1400 vs etcd 1000 (1.4×).
	keel := []*Results{run(3000, 10, 0), run(1400, 30, 5)}
	etcd := []*Results{run(1000, 20, 0), run(1000, 20, 1)}
	table, met, total := renderTable(cfg, keel, etcd)
	if total != 12 || met != 0 {
		t.Errorf("met %d of %d, want 0 of 12 (write: 1.4× in round 2; p99: 1.5× in round 2)\n%s", met, total, table)
	}
	want := "| write, 64 clients (ops/s) | 1400 | 1000 | 1.40× | ≥ 1.5× | **no** | 3000, 1400 (spread 73%) | 1000, 1000 (spread 0%) | 0, 5 / 0, 1 |"
	if !strings.Contains(table, want) {
		t.Errorf("write row missing or wrong, want\n%s\nin\n%s", want, table)
	}
	if !strings.Contains(table, "each by the worst of 2 keel and 2 etcd runs") {
		t.Errorf("no run count in the summary:\n%s", table)
	}
	// Both rounds good: met.
	keel[1] = run(2000, 10, 0)
	if _, met, _ := renderTable(cfg, keel, etcd); met != 2 {
		t.Errorf("both rounds meet write and p99: met %d, want 2", met)
	}
}
