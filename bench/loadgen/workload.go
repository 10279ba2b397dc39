package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Stats summarises one closed-loop run: successful operations, their latency
// percentiles, and errors (not counted as operations).
type Stats struct {
	Clients   int     `json:"clients"`
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	FirstErr  string  `json:"first_error,omitempty"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P90Ms     float64 `json:"p90_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	MaxMs     float64 `json:"max_ms"`
	// CPU per successful operation over the measured part of the run (warm-up
	// excluded): the load generator's own process and the servers' processes summed.
	// On 2 shared cores the client's share is CPU the servers could not use.
	ClientCPUUs float64 `json:"client_cpu_us_per_op,omitempty"`
	ServerCPUUs float64 `json:"server_cpu_us_per_op,omitempty"`
}

// opFunc is one operation of worker w; rng is the worker's own generator.
type opFunc func(ctx context.Context, w int, rng *rand.Rand) error

// loadSpec is a closed-loop run: clients workers issue op back to back. The first warm
// of the run is not measured. With extend set the run lasts until both dur has passed
// and extend is closed (bounded by maxExtra).
type loadSpec struct {
	clients   int
	warm, dur time.Duration
	extend    <-chan struct{}
	maxExtra  time.Duration
	opTimeout time.Duration
	op        opFunc
	pids      []int // server processes whose CPU is counted (none: the client's only)
}

type workerResult struct {
	lats     []time.Duration
	errs     int64
	firstErr string
	lastEnd  time.Time
}

func runLoad(ctx context.Context, s loadSpec) Stats {
	if s.opTimeout == 0 {
		s.opTimeout = 10 * time.Second
	}
	if s.maxExtra == 0 {
		s.maxExtra = 5 * time.Minute
	}
	start := time.Now()
	mStart := start.Add(s.warm)
	mEnd := mStart.Add(s.dur)
	hardEnd := mEnd.Add(s.maxExtra)
	var extended atomic.Bool
	if s.extend == nil {
		extended.Store(true)
	} else {
		go func() {
			select {
			case <-s.extend:
			case <-ctx.Done():
			}
			extended.Store(true)
		}()
	}
	results := make([]workerResult, s.clients)
	cpu0 := make(chan cpuSample, 1)
	go func() {
		time.Sleep(time.Until(mStart))
		cpu0 <- sampleCPU(s.pids)
	}()
	var wg sync.WaitGroup
	for w := 0; w < s.clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := &results[w]
			r.lats = make([]time.Duration, 0, 4096)
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(start.UnixNano())))
			for ctx.Err() == nil {
				t0 := time.Now()
				if (t0.After(mEnd) && extended.Load()) || t0.After(hardEnd) {
					break
				}
				octx, cancel := context.WithTimeout(ctx, s.opTimeout)
				err := s.op(octx, w, rng)
				cancel()
				t1 := time.Now()
				r.lastEnd = t1
				if t0.Before(mStart) {
					continue
				}
				if err != nil {
					r.errs++
					if r.firstErr == "" {
						r.firstErr = err.Error()
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				r.lats = append(r.lats, t1.Sub(t0))
			}
		}(w)
	}
	wg.Wait()
	cpu1 := sampleCPU(s.pids)
	st := summarise(s.clients, mStart, results)
	from := <-cpu0
	st.ClientCPUUs = perOp(from.self, cpu1.self, st.Ops)
	if len(s.pids) > 0 {
		st.ServerCPUUs = perOp(from.servers, cpu1.servers, st.Ops)
	}
	return st
}

func summarise(clients int, mStart time.Time, results []workerResult) Stats {
	st := Stats{Clients: clients}
	var all []time.Duration
	end := mStart
	for _, r := range results {
		all = append(all, r.lats...)
		st.Errors += r.errs
		if st.FirstErr == "" {
			st.FirstErr = r.firstErr
		}
		if r.lastEnd.After(end) {
			end = r.lastEnd
		}
	}
	st.Ops = int64(len(all))
	st.Seconds = end.Sub(mStart).Seconds()
	if st.Seconds > 0 {
		st.OpsPerSec = float64(st.Ops) / st.Seconds
	}
	if len(all) == 0 {
		return st
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		i := int(p * float64(len(all)-1))
		return float64(all[i]) / float64(time.Millisecond)
	}
	st.P50Ms, st.P90Ms, st.P99Ms, st.P999Ms = pct(0.50), pct(0.90), pct(0.99), pct(0.999)
	st.MaxMs = float64(all[len(all)-1]) / float64(time.Millisecond)
	return st
}

// batchJob is one transaction of a bulk load: keys written together.
type batchJob struct{ keys []string }

// runBatches writes every job with clients concurrent workers, each job one
// transaction to node. It stops at the first error and returns it.
func runBatches(ctx context.Context, d Driver, node, clients int, jobs []batchJob, val []byte) (time.Duration, error) {
	start := time.Now()
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(jobs)) {
					return
				}
				var err error
				for attempt := 0; attempt < 5; attempt++ { // bounded retry of a busy server
					octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
					_, err = d.PutBatch(octx, node, w, jobs[i].keys, val)
					ocancel()
					if err == nil {
						break
					}
					time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
				}
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}(w)
	}
	wg.Wait()
	return time.Since(start), firstErr
}
