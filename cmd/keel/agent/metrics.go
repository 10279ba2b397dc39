package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keel-kv/keel/kv/api"
)

// enableMetrics serves /metrics from a registry of this agent's own: the HTTP and
// stream doors' requests, the etcd door's gRPC calls, the node's replication and
// storage (nodeMetrics), storage versions and migrations, and the Go and process
// collectors. Every series is read from its source at each scrape or kept by
// client_golang for the process's life: none expires on a steady cluster.
//
// hashicorp/raft and memberlist also report through go-metrics, which is
// process-global; keel no longer bridges it (it lost histograms and labels, expired
// idle gauges, and with several agents in one process fed only the last one), so
// those reports go to go-metrics' default black hole.
func (a *Agent) enableMetrics() error {
	reg := prometheus.NewRegistry()
	a.metricsReg = reg // startEtcd adds the etcd door's
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versionsCollector{a}, migrationsCollector{a},
		keyMigrationsCollector{a})
	a.metrics.baseIndex = a.store.AppliedIndex() // before the first scrape: Serve starts after
	reg.MustRegister(a.metrics.collectors()...)
	if err := a.httpd.EnableMetrics(reg); err != nil {
		return err
	}
	a.httpd.Handle("GET "+api.PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return nil
}
