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
	keel := &Results{Stats: map[string]Stats{"write64": {Ops: 1, OpsPerSec: 3000, P99Ms: 10}},
		Metrics: map[string]float64{"compact.p99_ratio": 1.1, "rss.max_mb": 500}}
	etcd := &Results{Stats: map[string]Stats{"write64": {Ops: 1, OpsPerSec: 1000, P99Ms: 20}},
		Metrics: map[string]float64{"compact.p99_ratio": 2.0, "rss.max_mb": 400}}
	table, met, total := renderTable(cfg, keel, etcd)
	// write 3×: met; p99 0.5×: met; compaction keel 1.1 ≤ 1.2: met; RSS 1.25×: not met;
	// reads and scan: not measured.
	if total != 7 || met != 3 {
		t.Errorf("met %d of %d, want 3 of 7\n%s", met, total, table)
	}
	if !strings.Contains(table, "| write, 64 clients (ops/s) | 3000 | 1000 | 3.00× | ≥ 1.5× | yes |") {
		t.Errorf("write row missing or wrong:\n%s", table)
	}
	if !strings.Contains(table, "1.25× | ≤ 1.0× | **no** |") {
		t.Errorf("RSS row should miss its target:\n%s", table)
	}
}
