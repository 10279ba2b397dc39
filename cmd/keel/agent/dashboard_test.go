package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/versions"
)

// dashboardMetrics returns every metric name the Grafana dashboard's queries use.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	walk(doc)
	name := regexp.MustCompile(`\b(?:keel|go|process)_[a-zA-Z0-9_]+\b`)
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, m := range name.FindAllString(e, -1) {
			seen[m] = true
		}
	}
	var out []string
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	if len(exprs) < 10 || len(out) < 10 {
		t.Fatalf("the dashboard has %d queries over %d metrics: not what this test expects", len(exprs), len(out))
	}
	return out
}

// TestGrafanaDashboardMetricsExist: every metric docs/grafana-dashboard.json queries is
// on /metrics of a running node with a schema that has served HTTP and stream requests.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	want := dashboardMetrics(t)
	s, err := versions.LoadSchema(filepath.Join("..", "..", "..", "docs", "examples", "widgets-v2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, t.TempDir(), "n1")
	cfg.Raft.Bootstrap = true
	cfg.Schema = s
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	c, err := client.New([]string{a.HTTPAddr()}, client.Options{Stream: true, MaxRetries: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil { // stream
		t.Fatal(err)
	}
	if _, err := c.Status(ctx); err != nil { // HTTP
		t.Fatal(err)
	}
	waitFor(t, "every dashboard metric on /metrics", 20*time.Second, func() error {
		// An object of the schema's resource, so that its counts are exported.
		if code := apiCall(t, a, "PUT", "/apis/apps/v2/widgets/w1", map[string]any{"spec": map[string]any{"replicas": 1}}, nil); code >= 300 {
			return fmt.Errorf("PUT a widget: %d", code) // 503 until registered
		}
		text, err := c.Metrics(ctx)
		if err != nil {
			return err
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
		var missing []string
		for _, m := range want {
			if !have[m] {
				missing = append(missing, m)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("/metrics lacks %v", missing)
		}
		return nil
	})
}
