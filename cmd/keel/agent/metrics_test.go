package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
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
