package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
)

// TestOTLPEndpoint: with Config.OTLPEndpoint (-otlp-endpoint) the agent installs an
// exporter to it, and Close flushes what was batched: a span ended before Close
// reaches the collector, with the node's ID as service.instance.id. A malformed
// endpoint fails Start. Kills: the endpoint ignored, and Close not flushing (the
// batch would be lost with the process).
func TestOTLPEndpoint(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.URL.Path+" "+string(b))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	dir := t.TempDir()
	bad := testConfig(t, dir, "n0")
	bad.OTLPEndpoint = "localhost:4318"
	if a, err := Start(context.Background(), bad); err == nil {
		a.Close(context.Background())
		t.Fatal("Start accepted an OTLP endpoint without a scheme")
	}

	cfg := testConfig(t, dir, "n1")
	cfg.Raft.Bootstrap = true
	cfg.OTLPEndpoint = srv.URL
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("github.com/keel-kv/keel/migrate").Start(context.Background(), "migrate.step")
	span.End()
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || !strings.HasPrefix(got[0], "/v1/traces ") || !strings.Contains(got[0], `"migrate.step"`) ||
		!strings.Contains(got[0], `"service.instance.id","value":{"stringValue":"n1"}`) {
		t.Fatalf("collector got %q", got)
	}
}
