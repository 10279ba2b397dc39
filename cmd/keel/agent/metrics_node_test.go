package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/raft"
)

// TestPeerSeries: a heartbeat gives a peer its round-trip series and a zero failure
// count, a failed AppendEntries counts, under keel's and etcd's names; a server that
// left the configuration loses its series.
//
//	n2: heartbeat, heartbeat, failure   → rtt count 2, failures 1
//	n3: heartbeat                       → removed from the configuration: no series
func TestPeerSeries(t *testing.T) {
	m := newNodeMetrics(nil, true)
	m.AppendEntries("n2", true, time.Millisecond, nil)
	m.AppendEntries("n2", true, 2*time.Millisecond, nil)
	m.AppendEntries("n2", false, time.Second, errors.New("connection refused"))
	m.AppendEntries("n3", true, time.Millisecond, nil)
	m.AppendEntries("n2", false, 5*time.Millisecond, nil) // entries: not a round trip
	if got := gatherValue(t, m.peerFailures, "n2"); got != 1 {
		t.Errorf("n2 failures = %v, want 1", got)
	}
	if got := gatherValue(t, m.etcdPeerFailures, "n3"); got != 0 {
		t.Errorf("n3 etcd failures = %v, want 0", got)
	}
	if n := collectCount(m.peerRTT); n != 2 {
		t.Errorf("%d round-trip series, want 2 (n2, n3)", n)
	}
	m.forgetPeers([]raft.Member{{ID: "n1"}, {ID: "n2"}})
	for _, tc := range []struct {
		name string
		n    int
	}{
		{"keel_network_peer_round_trip_time_seconds", collectCount(m.peerRTT)},
		{"keel_network_peer_sent_failures_total", collectCount(m.peerFailures)},
		{"etcd_network_peer_round_trip_time_seconds", collectCount(m.etcdPeerRTT)},
		{"etcd_network_peer_sent_failures_total", collectCount(m.etcdPeerFailures)},
	} {
		if tc.n != 1 {
			t.Errorf("%s: %d series after n3 left, want 1 (n2)", tc.name, tc.n)
		}
	}
}

// collectCount is the number of series c collects now.
func collectCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// gatherValue is the counter value of the series of c whose one label is label.
func gatherValue(t *testing.T, c prometheus.Collector, label string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if ls := m.GetLabel(); len(ls) == 1 && ls[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series with label %q", label)
	return 0
}
