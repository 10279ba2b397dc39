package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMetricsEndpoint(t *testing.T) {
	c := newTestCluster(t, 1)
	if _, err := c.client(0).Put(context.Background(), "m", []byte("v")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + c.agents[0].HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	// The write is applied: the applied index is past the cluster's start records.
	waitFor(t, "keel_server_proposals_applied_total counted", 5*time.Second, func() error {
		resp, err := http.Get("http://" + c.agents[0].HTTPAddr() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "keel_server_proposals_applied_total "); ok && v != "0" {
				return nil
			}
		}
		return errors.New("no keel_server_proposals_applied_total sample yet")
	})
	for _, want := range []string{
		`keel_http_requests_total{code="200",method="PUT",route="PUT /v1/kv/{key...}"} 1`,
		"keel_http_request_duration_seconds_bucket",
		"keel_server_has_leader 1",
		"keel_server_is_leader 1",
		`keel_raft_peers{suffrage="voter"} 1`,
		"keel_disk_wal_fsync_duration_seconds_bucket",
		"keel_disk_backend_commit_duration_seconds_bucket",
		"keel_autopilot_healthy 1",
		"# TYPE keel_disk_wal_fsync_duration_seconds histogram",
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// etcd's names come with the etcd door only (this node serves none).
	for _, unwanted := range []string{"etcd_server_has_leader", "grpc_server_handled_total"} {
		if strings.Contains(string(body), unwanted) {
			t.Errorf("/metrics has %q without the etcd door", unwanted)
		}
	}
}

// TestProposalCountersStartAtRestart: keel's proposal counters count what this process
// applied — from the snapshot it restored at start, so the log entries after it, which
// it replays, count — and a restart reads as a counter reset, not as a jump by the
// whole log in rate(); etcd's names carry the index itself.
//
//	20 puts, snapshot at ~28, 5 puts, restart → keel ≈ 5 (replayed), etcd ≈ 33
func TestProposalCountersStartAtRestart(t *testing.T) {
	c := newTestClusterWith(t, 1, nil, func(cfg *Config) { cfg.EtcdAddr = freeAddr(t) })
	for i := range 20 {
		if _, err := c.client(0).Put(context.Background(), fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.agents[0].Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.client(0).Put(context.Background(), fmt.Sprintf("after%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	c.restart(0)
	c.waitReady(0)
	text, err := c.client(0).Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string) float64 {
		for _, l := range strings.Split(string(text), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", l, err)
				}
				return f
			}
		}
		t.Fatalf("/metrics lacks %s", name)
		return 0
	}
	keel, etcd := value("keel_server_proposals_applied_total"), value("etcd_server_proposals_applied_total")
	if etcd < 25 || keel < 5 || keel >= 20 {
		t.Errorf("after a restart: keel_server_proposals_applied_total %v (want 5 to 20: the replayed entries and "+
			"the start's), etcd_server_proposals_applied_total %v (want the index, >= 25)", keel, etcd)
	}
}
