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
	// hashicorp/raft's per-write counter arrives summed, within a second.
	waitFor(t, "keel_raft_apply counted", 5*time.Second, func() error {
		resp, err := http.Get("http://" + c.agents[0].HTTPAddr() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "keel_raft_apply "); ok && v != "0" {
				return nil
			}
		}
		return errors.New("no keel_raft_apply sample yet")
	})
	for _, want := range []string{
		`keel_http_requests_total{code="200",method="PUT",route="PUT /v1/kv/{key...}"} 1`,
		"keel_http_request_duration_seconds_bucket",
		"keel_raft_", // hashicorp/raft's go-metrics, bridged
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
