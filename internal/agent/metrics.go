package agent

import (
	"context"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// enableMetrics serves /metrics: the HTTP API's request counts and latencies, Go and
// process collectors, and hashicorp/raft's and memberlist's go-metrics bridged in.
func (a *Agent) enableMetrics() error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versionsCollector{a})
	if err := a.server.EnableMetrics(reg); err != nil {
		return err
	}
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: reg, Expiration: time.Minute})
	if err != nil {
		return err
	}
	mcfg := gometrics.DefaultConfig("keel")
	mcfg.EnableHostname = false
	mcfg.EnableRuntimeMetrics = false // the Go collector reports those
	// go-metrics is process-global (raft and memberlist report through it); with several
	// agents in one process (tests) the last one started receives them.
	if _, err := gometrics.NewGlobal(mcfg, sink); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stopMetrics = cancel
	go sink.RunBackgroundCleanup(ctx)
	a.server.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return nil
}
