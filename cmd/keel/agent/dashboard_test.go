package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
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
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, m := range seriesOf(e) {
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
