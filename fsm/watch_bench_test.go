package fsm

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkWatchIdle10k measures the heap cost of 10,000 registered idle watchers, each
// with a goroutine blocked in Next (as an HTTP watch handler is): bytes/watcher counts
// the watcher and its goroutine's stack (the stack is what dominates).
func BenchmarkWatchIdle10k(b *testing.B) { benchmarkWatchIdle(b, 10000) }

func benchmarkWatchIdle(b *testing.B, n int) {
	for b.Loop() {
		s := NewStore()
		apply(b, s, txn(put("x", "1")))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ws := make([]*Watcher, n)
		ready := make(chan struct{}, n)
		for i := range ws {
			w, err := s.Watch(WatchOptions{Key: []byte(fmt.Sprintf("idle/%05d", i))})
			if err != nil {
				b.Fatal(err)
			}
			ws[i] = w
			wg.Add(1)
			go func() {
				defer wg.Done()
				c0, c := context.WithCancel(ctx)
				c() // the first Next registers and returns at once
				w.Next(c0)
				ready <- struct{}{}
				w.Next(ctx)
			}()
		}
		for range n {
			<-ready
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perWatcher := float64(after.HeapAlloc+after.StackInuse-before.HeapAlloc-before.StackInuse) / float64(n)
		b.ReportMetric(perWatcher, "bytes/watcher")
		cancel()
		wg.Wait()
		for _, w := range ws {
			w.Close()
		}
	}
}

// BenchmarkWatchFanOut1000: one writer, 1,000 watchers of one prefix each consuming in
// its own goroutine. events/s counts events delivered to watchers (writes × 1,000);
// p99-µs is the delay from the start of a write's apply to its arrival at a watcher.
// The writer does not wait for the watchers, so their buffers hold the whole run: with
// the default buffer, watchers starved of CPU by the writer would be ended as slow.
func BenchmarkWatchFanOut1000(b *testing.B) { benchmarkWatchFanOut(b, 1000) }

func benchmarkWatchFanOut(b *testing.B, watchers int) {
	s := NewStore()
	const writes = 2000
	for b.Loop() {
		start := s.Revision() + 1
		sent := make([]time.Time, writes)
		lat := make([][]time.Duration, watchers)
		var wg sync.WaitGroup
		ready := make(chan struct{}, watchers)
		for i := range watchers {
			w, err := s.Watch(WatchOptions{Key: []byte("fan/"), End: PrefixEnd([]byte("fan/")), StartRevision: start, Buffer: writes})
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer w.Close()
				c0, c := context.WithCancel(context.Background())
				c()
				w.Next(c0)
				ready <- struct{}{}
				l := make([]time.Duration, 0, writes)
				for len(l) < writes {
					gs, err := w.Next(context.Background())
					if err != nil {
						b.Error(err)
						return
					}
					now := time.Now()
					for _, g := range gs {
						for range g.Events {
							l = append(l, now.Sub(sent[g.Revision-start]))
						}
					}
				}
				lat[i] = l
			}()
		}
		for range watchers {
			<-ready
		}
		t0 := time.Now()
		val := make([]byte, 100)
		for j := range writes {
			sent[j] = time.Now()
			apply(b, s, txn(Op{Type: OpPut, Key: []byte(fmt.Sprintf("fan/%d", j%100)), Value: val}))
		}
		wg.Wait()
		el := time.Since(t0)
		var all []time.Duration
		for _, l := range lat {
			all = append(all, l...)
		}
		slices.Sort(all)
		b.ReportMetric(float64(len(all))/el.Seconds(), "events/s")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}
