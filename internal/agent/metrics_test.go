package agent

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
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
