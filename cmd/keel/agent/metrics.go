package agent

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keel-kv/keel/kv/api"
)

// enableMetrics serves /metrics: the HTTP API's request counts and latencies, Go and
// process collectors, and hashicorp/raft's and memberlist's go-metrics bridged in.
func (a *Agent) enableMetrics() error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versionsCollector{a}, migrationsCollector{a},
		keyMigrationsCollector{a})
	if err := a.httpd.EnableMetrics(reg); err != nil {
		return err
	}
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: reg, Expiration: time.Minute})
	if err != nil {
		return err
	}
	mcfg := gometrics.DefaultConfig("keel")
	mcfg.EnableHostname = false
	mcfg.EnableRuntimeMetrics = false // the Go collector reports those
	cs := &coalescingSink{MetricSink: sink, counts: map[string]*pendingCount{}}
	// go-metrics is process-global (raft and memberlist report through it); with several
	// agents in one process (tests) the last one started receives them.
	if _, err := gometrics.NewGlobal(mcfg, cs); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sink.RunBackgroundCleanup(ctx) // starts its own goroutine, which ends with ctx
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cs.run(ctx, time.Second)
	}()
	a.stopMetrics = func() { cancel(); wg.Wait() }
	a.httpd.Handle("GET "+api.PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return nil
}

// coalescingSink sums counter increments in memory and hands the sums to the
// Prometheus sink once per interval. hashicorp/raft counts every Apply
// (raft.apply), and the Prometheus sink's per-call key flattening cost a tenth of the
// leader's CPU under write load; a sum per key per second costs nothing. Gauges and
// samples pass straight through.
type coalescingSink struct {
	gometrics.MetricSink
	mu     sync.Mutex
	counts map[string]*pendingCount
}

type pendingCount struct {
	key    []string
	labels []gometrics.Label
	n      float32
}

func (s *coalescingSink) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}

func (s *coalescingSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	k := strings.Join(key, "\x00")
	for _, l := range labels {
		k += "\x01" + l.Name + "\x02" + l.Value
	}
	s.mu.Lock()
	p := s.counts[k]
	if p == nil {
		p = &pendingCount{key: slices.Clone(key), labels: slices.Clone(labels)}
		s.counts[k] = p
	}
	p.n += val
	s.mu.Unlock()
}

// flush hands every pending sum to the wrapped sink.
func (s *coalescingSink) flush() {
	s.mu.Lock()
	var due []pendingCount
	for _, p := range s.counts {
		if p.n != 0 {
			due = append(due, *p)
			p.n = 0
		}
	}
	s.mu.Unlock()
	for _, p := range due {
		s.MetricSink.IncrCounterWithLabels(p.key, p.n, p.labels)
	}
}

func (s *coalescingSink) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.flush()
			return
		case <-t.C:
			s.flush()
		}
	}
}
