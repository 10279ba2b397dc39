package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// scrapeNames returns the metric names of one /metrics answer of agent i.
func scrapeNames(t *testing.T, c *testCluster, i int) map[string]bool {
	t.Helper()
	text, err := c.client(i).Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(text), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			have[l[:i]] = true
		}
	}
	return have
}

// TestRaftSeriesOutliveExpiry: the series present right after start are still there on
// a steady, idle cluster later (issue #38: go-metrics' Prometheus sink expired a gauge
// nobody updated for a minute, and the dashboard's Peers panel went empty). With the
// sink's expiry cut to a second this test failed on keel_raft_peers; keel now reads
// the node at each scrape and has no expiry to shrink, so the test waits a few
// seconds, and TestDashboardAndAlertSeriesAfterTwoMinutes waits past the old minute.
func TestRaftSeriesOutliveExpiry(t *testing.T) {
	c := newTestCluster(t, 1)
	want := []string{"keel_raft_peers", "keel_server_has_leader", "keel_server_leader_changes_seen_total",
		"keel_disk_wal_fsync_duration_seconds_bucket"}
	waitFor(t, "raft series on /metrics", 10*time.Second, func() error {
		have := scrapeNames(t, c, 0)
		for _, m := range want {
			if !have[m] {
				return fmt.Errorf("no %s yet", m)
			}
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	have := scrapeNames(t, c, 0)
	for _, m := range want {
		if !have[m] {
			t.Errorf("%s is gone 3s after it was there: a steady cluster's series expired", m)
		}
	}
}
