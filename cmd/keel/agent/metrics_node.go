package agent

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/raft"
)

// nodeMetrics are the node's replication and storage metrics, named after etcd's
// under keel_ (docs/operations.md, "Metrics and alerts"). It is the raft.Observer of the
// node (timings, into histograms) and a prometheus.Collector (everything else,
// read from the node at each scrape, so no series expires on a steady cluster).
//
// With etcd names on (the agent serves the etcd API), each series is also exported
// under etcd's own name, labels and type, so etcd's dashboards and the etcd mixin's
// alerts work unchanged against a keel cluster.
type nodeMetrics struct {
	a         *Agent
	etcdNames bool

	fsync, commit    prometheus.Histogram
	batch            prometheus.Histogram
	peerRTT          *prometheus.HistogramVec // label to
	peerFailures     *prometheus.CounterVec   // label to
	etcdFsync        prometheus.Histogram
	etcdCommit       prometheus.Histogram
	etcdPeerRTT      *prometheus.HistogramVec // label To
	etcdPeerFailures *prometheus.CounterVec   // label To
	// peers are the server IDs the peer series have; a scrape drops those no longer
	// in the configuration (forgetPeers).
	peers sync.Map
	// baseIndex is the store's applied index when /metrics began — the snapshot the
	// node restored, before it replays the log after it: keel's proposal counters
	// count from it, so that a restart reads as a counter reset, not as a jump by the
	// whole log (etcd's gauges carry the raw index).
	baseIndex uint64
}

var _ raft.Observer = (*nodeMetrics)(nil)

// etcd's buckets, so that the mixin's thresholds (fsync p99 > 0.5 s, commit p99 >
// 0.25 s) fall on bucket bounds as they do for etcd.
var (
	diskBuckets = prometheus.ExponentialBuckets(0.001, 2, 14)  // 1 ms .. 8 s
	rttBuckets  = prometheus.ExponentialBuckets(0.0001, 2, 16) // 0.1 ms .. 3.3 s
)

func newNodeMetrics(a *Agent, etcdNames bool) *nodeMetrics {
	h := func(name, help string, b []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b})
	}
	hv := func(name, help string, b []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b}, labels)
	}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &nodeMetrics{a: a, etcdNames: etcdNames,
		fsync: h("keel_disk_wal_fsync_duration_seconds",
			"Latency of the Raft log's fdatasync, one per batch of entries.", diskBuckets),
		commit: h("keel_disk_backend_commit_duration_seconds",
			"Latency of applying a committed batch to the store and publishing its view (etcd's backend commit).", diskBuckets),
		batch: h("keel_raft_apply_batch_entries",
			"Entries per batch the state machine applied.", prometheus.ExponentialBuckets(1, 2, 10)),
		peerRTT: hv("keel_network_peer_round_trip_time_seconds",
			"Round trip of the leader's heartbeats to each peer (an AppendEntries with no entries).", rttBuckets, "to"),
		peerFailures: cv("keel_network_peer_sent_failures_total",
			"The leader's AppendEntries to a peer that failed (peer down, partitioned, refusing).", "to"),
		etcdFsync:        h("etcd_disk_wal_fsync_duration_seconds", "etcd name of keel_disk_wal_fsync_duration_seconds.", diskBuckets),
		etcdCommit:       h("etcd_disk_backend_commit_duration_seconds", "etcd name of keel_disk_backend_commit_duration_seconds.", diskBuckets),
		etcdPeerRTT:      hv("etcd_network_peer_round_trip_time_seconds", "etcd name of keel_network_peer_round_trip_time_seconds.", rttBuckets, "To"),
		etcdPeerFailures: cv("etcd_network_peer_sent_failures_total", "etcd name of keel_network_peer_sent_failures_total.", "To"),
	}
}

// WALSynced implements raft.Observer.
func (m *nodeMetrics) WALSynced(d time.Duration) {
	m.fsync.Observe(d.Seconds())
	if m.etcdNames {
		m.etcdFsync.Observe(d.Seconds())
	}
}

// BatchApplied implements raft.Observer.
func (m *nodeMetrics) BatchApplied(entries int, d time.Duration) {
	m.commit.Observe(d.Seconds())
	m.batch.Observe(float64(entries))
	if m.etcdNames {
		m.etcdCommit.Observe(d.Seconds())
	}
}

// AppendEntries implements raft.Observer: heartbeats give the round trip, failures
// of any AppendEntries count. A peer's failure count exists (at 0) from its first
// heartbeat, so that a rate over it is defined before the first failure.
func (m *nodeMetrics) AppendEntries(peer string, heartbeat bool, d time.Duration, err error) {
	switch {
	case err != nil:
		m.peerFailures.WithLabelValues(peer).Inc()
		if m.etcdNames {
			m.etcdPeerFailures.WithLabelValues(peer).Inc()
		}
	case heartbeat:
		m.peers.Store(peer, struct{}{})
		m.peerFailures.WithLabelValues(peer)
		m.peerRTT.WithLabelValues(peer).Observe(d.Seconds())
		if m.etcdNames {
			m.etcdPeerFailures.WithLabelValues(peer)
			m.etcdPeerRTT.WithLabelValues(peer).Observe(d.Seconds())
		}
	}
}

// forgetPeers deletes the peer series of servers no longer in the configuration,
// so that a removed server's last round trip does not stay on /metrics for the life of
// the process. A series deleted while the leader still sends to the server (it is
// being removed) comes back, and goes at the next scrape.
func (m *nodeMetrics) forgetPeers(members []raft.Member) {
	in := map[string]bool{}
	for _, mb := range members {
		in[mb.ID] = true
	}
	m.peers.Range(func(k, _ any) bool {
		if id := k.(string); !in[id] {
			m.peers.Delete(id)
			for _, v := range []interface{ DeleteLabelValues(...string) bool }{m.peerRTT, m.peerFailures,
				m.etcdPeerRTT, m.etcdPeerFailures} {
				v.DeleteLabelValues(id)
			}
		}
		return true
	})
}

// collectors are what /metrics registers of m.
func (m *nodeMetrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.fsync, m.commit, m.batch, m.peerRTT, m.peerFailures, nodeCollector{m}}
	if m.etcdNames {
		cs = append(cs, m.etcdFsync, m.etcdCommit, m.etcdPeerRTT, m.etcdPeerFailures)
	}
	return cs
}

// nodeCollector reads the node's state at each scrape.
type nodeCollector struct{ m *nodeMetrics }

// metricDesc is one series family of nodeCollector: keel's name, and etcd's when
// etcd has one (etcd's type may differ: its proposals_committed_total is a gauge).
type metricDesc struct {
	keel, etcd         *prometheus.Desc
	keelType, etcdType prometheus.ValueType
}

func newMetricDesc(keel, etcd string, keelType, etcdType prometheus.ValueType, help string, labels ...string) metricDesc {
	d := metricDesc{keel: prometheus.NewDesc(keel, help, labels, nil), keelType: keelType, etcdType: etcdType}
	if etcd != "" {
		d.etcd = prometheus.NewDesc(etcd, "etcd name of "+keel+".", labels, nil)
	}
	return d
}

var (
	gauge, counter = prometheus.GaugeValue, prometheus.CounterValue

	descHasLeader = newMetricDesc("keel_server_has_leader", "etcd_server_has_leader", gauge, gauge,
		"1 if this node knows a leader (leads or follows one), 0 if not.")
	descIsLeader = newMetricDesc("keel_server_is_leader", "etcd_server_is_leader", gauge, gauge,
		"1 if this node leads.")
	descLeaderChanges = newMetricDesc("keel_server_leader_changes_seen_total", "etcd_server_leader_changes_seen_total",
		counter, counter, "Leader changes this node has seen since it started.")
	descCommitted = newMetricDesc("keel_server_proposals_committed_total", "etcd_server_proposals_committed_total",
		counter, gauge, "Raft entries committed past the snapshot this process restored at start (etcd's name carries the commit index).")
	descApplied = newMetricDesc("keel_server_proposals_applied_total", "etcd_server_proposals_applied_total",
		counter, gauge, "Raft entries this process applied past the snapshot it restored at start, log replay included (etcd's name carries the applied index).")
	descPending = newMetricDesc("keel_server_proposals_pending", "etcd_server_proposals_pending", gauge, gauge,
		"Writes this node, as leader, has proposed and not yet applied.")
	descFailed = newMetricDesc("keel_server_proposals_failed_total", "etcd_server_proposals_failed_total",
		counter, counter, "Writes this node proposed as leader that failed (leadership lost, timeout, shutdown).")
	descDBSize = newMetricDesc("keel_mvcc_db_total_size_bytes", "etcd_mvcc_db_total_size_in_bytes", gauge, gauge,
		"Bytes of the node's data directory: Raft log, stable store and snapshots.")
	descQuota = newMetricDesc("keel_server_quota_backend_bytes", "etcd_server_quota_backend_bytes", gauge, gauge,
		"Bytes the data directory may grow to: its size plus the free space of its file system (keel has no quota of its own).")
	descTerm  = newMetricDesc("keel_raft_term", "", gauge, 0, "The Raft term this node is in.")
	descPeers = newMetricDesc("keel_raft_peers", "", gauge, 0,
		"Servers in the Raft configuration, by suffrage.", "suffrage")
	descWatchers = newMetricDesc("keel_mvcc_watchers", "", gauge, 0,
		"Watches registered with the store's fan-out (every door's).")
	descSlowEnded = newMetricDesc("keel_mvcc_slow_watchers_ended_total", "", counter, 0,
		"Watches ended because their consumer fell a queue's bound behind (the client resumes them).")
	descAutopilotHealthy = newMetricDesc("keel_autopilot_healthy", "", gauge, 0,
		"Leader only: 1 if every server of the configuration answered the leader within the heartbeat timeout (Consul's autopilot_healthy).")
	descFailureTolerance = newMetricDesc("keel_autopilot_failure_tolerance", "", gauge, 0,
		"Leader only: healthy voters beyond a quorum, the voters the cluster can lose now (Consul's autopilot_failure_tolerance).")

	nodeDescs = []metricDesc{descHasLeader, descIsLeader, descLeaderChanges, descCommitted, descApplied,
		descPending, descFailed, descDBSize, descQuota, descTerm, descPeers, descWatchers, descSlowEnded,
		descAutopilotHealthy, descFailureTolerance}
)

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range nodeDescs {
		ch <- d.keel
		if d.etcd != nil && c.m.etcdNames {
			ch <- d.etcd
		}
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.m.a
	if a.node == nil {
		return
	}
	emit := func(d metricDesc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d.keel, d.keelType, v, labels...)
		if d.etcd != nil && c.m.etcdNames {
			ch <- prometheus.MustNewConstMetric(d.etcd, d.etcdType, v, labels...)
		}
	}
	st := a.node.Status()
	n := a.node.Counters()
	emit(descHasLeader, boolFloat(st.LeaderID != ""))
	emit(descIsLeader, boolFloat(st.State == "Leader"))
	emit(descLeaderChanges, float64(n.LeaderChanges))
	for _, x := range []struct {
		d     metricDesc
		index uint64
	}{{descCommitted, st.CommitIndex}, {descApplied, st.AppliedIndex}} {
		ch <- prometheus.MustNewConstMetric(x.d.keel, x.d.keelType, float64(x.index-min(x.index, c.m.baseIndex)))
		if c.m.etcdNames {
			ch <- prometheus.MustNewConstMetric(x.d.etcd, x.d.etcdType, float64(x.index))
		}
	}
	emit(descPending, float64(n.ProposalsPending))
	emit(descFailed, float64(n.ProposalsFailed))
	emit(descTerm, float64(st.Term))
	voters, nonvoters := 0, 0
	for _, mb := range st.Members {
		if mb.Suffrage.String() == "Voter" {
			voters++
		} else {
			nonvoters++
		}
	}
	if len(st.Members) > 0 {
		c.m.forgetPeers(st.Members)
	}
	emit(descPeers, float64(voters), "voter")
	emit(descPeers, float64(nonvoters), "nonvoter")
	if size, err := a.DataSize(); err == nil {
		emit(descDBSize, float64(size))
		if free, err := freeBytes(a.cfg.DataDir); err == nil {
			emit(descQuota, float64(size)+float64(free))
		}
	}
	emit(descWatchers, float64(a.store.Watchers()))
	emit(descSlowEnded, float64(a.store.SlowWatchersEnded()))
	if st.State == "Leader" {
		healthy, tolerance := c.autopilot(st)
		emit(descAutopilotHealthy, boolFloat(healthy))
		emit(descFailureTolerance, float64(tolerance))
	}
}

// autopilot judges the servers as Consul's autopilot does, from the leader's side: a
// server is healthy when it answered an AppendEntries within the heartbeat timeout
// (the leader itself is); the cluster is healthy when every server is, and tolerates
// the loss of the healthy voters beyond a quorum.
func (c nodeCollector) autopilot(st raft.Status) (healthy bool, tolerance int) {
	threshold := c.m.a.cfg.Raft.HeartbeatTimeout
	if threshold <= 0 {
		threshold = raft.DefaultConfig().HeartbeatTimeout
	}
	contact := c.m.a.node.PeerContact()
	now := time.Now()
	healthy = true
	voters, healthyVoters := 0, 0
	for _, mb := range st.Members {
		at, ok := contact[mb.ID]
		ok = mb.ID == st.NodeID || (ok && now.Sub(at) <= threshold)
		healthy = healthy && ok
		if mb.Suffrage.String() == "Voter" {
			voters++
			if ok {
				healthyVoters++
			}
		}
	}
	return healthy, max(healthyVoters-(voters/2+1), 0)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
