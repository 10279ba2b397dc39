package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/versions"
)

var alertsFile = filepath.Join("..", "..", "..", "docs", "alerts", "keel-alerts.yml")

// ruleFile is Prometheus' rule file format (its model/rulefmt), the fields keel's
// file uses. keel does not import rulefmt: it lives in the prometheus/prometheus
// module, which would upgrade fifteen of keel's modules (client_golang, otel,
// grpc-gateway among them) for one test; promtool, when installed, checks the file
// with Prometheus' own parser (TestAlertRulesPromtool).
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// seriesName finds the names of the series an expression reads: keel's, etcd's,
// gRPC's, Go's and the process collector's. Prometheus' own `up` is not on /metrics.
// Label names (grpc_method, ...) are taken out first (labelLists).
var seriesName = regexp.MustCompile(`\b(?:keel|etcd|grpc|go|process)_[a-zA-Z0-9_]+\b`)

// labelLists are the parts of an expression that name labels, not series: a
// selector's matchers and a by/without clause.
var labelLists = regexp.MustCompile(`\{[^}]*\}|\b(?:by|without)\s*\([^)]*\)`)

// seriesOf is the names of the series expr reads.
func seriesOf(expr string) []string {
	return seriesName.FindAllString(labelLists.ReplaceAllString(expr, " "), -1)
}

// alertSeries parses docs/alerts/keel-alerts.yml strictly, checks each rule's form,
// and returns every series name the rules read, with the alerts reading each.
func alertSeries(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	out := map[string][]string{}
	n := 0
	for _, g := range f.Groups {
		for i, r := range g.Rules {
			n++
			where := fmt.Sprintf("%s: group %s rule #%d (%s)", alertsFile, g.Name, i, r.Alert)
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: alert and expr are required", where)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", where, r.For, err)
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: severity %q: want critical, warning or info", where, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: summary and description annotations are required", where)
			}
			for _, m := range seriesOf(r.Expr) {
				out[m] = append(out[m], r.Alert)
			}
		}
	}
	if n < 10 || len(out) < 8 {
		t.Fatalf("%s: %d rules over %d series: not what this test expects", alertsFile, n, len(out))
	}
	return out
}

// TestAlertRulesPromtool checks the rules with Prometheus' own parser (promtool,
// Debian's prometheus package), when it is installed; with KEEL_PROMTOOL_STRICT set
// (CI) its absence fails the test.
func TestAlertRulesPromtool(t *testing.T) {
	alertSeries(t)
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("KEEL_PROMTOOL_STRICT") != "" {
			t.Fatal("promtool not installed and KEEL_PROMTOOL_STRICT is set (apt-get install prometheus)")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	out, err := exec.Command(promtool, "check", "rules", alertsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// metricsSchema is widgets-v2 with a key migration: a schema whose storage
// versions, migrations and key migrations all have series.
const metricsSchema = `resources:
  - group: apps
    name: widgets
    prefix: /registry/apps/widgets/
    preferredVersion: v2
    versions:
      - name: v1
        served: true
      - name: v2
        served: true
    conversions:
      - from: v1
        to: v2
        ops:
          - rename: {from: spec.size, to: spec.replicas}
    keyMigrations:
      - name: widgets-keys
        from: /registry/apps/widgets/
        to: /registry/apps/v2/widgets/
`

// startMetricsCluster starts three gossip nodes (bootstrap-expect 3) serving the etcd
// API and metricsSchema, and gives every door some work: HTTP and stream writes, an
// object of the schema's resource.
func startMetricsCluster(t *testing.T) *gossipCluster {
	t.Helper()
	path := filepath.Join(t.TempDir(), "schema.yaml")
	if err := os.WriteFile(path, []byte(metricsSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := versions.LoadSchema(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		i := c.add(3)
		c.cfgs[i].Schema = s
		c.cfgs[i].EtcdAddr = freeAddr(t)
	}
	for i := range 3 {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	c.waitConfig("bootstrap-expect 3", 20*time.Second, func(v, nv []string) bool { return len(v) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, a := range c.agents {
		cl, err := client.New([]string{a.HTTPAddr()}, client.Options{Stream: i%2 == 0, MaxRetries: 20})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := cl.Put(ctx, fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "an object of the schema's resource", 20*time.Second, func() error {
		if code := apiCall(t, c.agents[0], "PUT", "/apis/apps/v2/widgets/w1", map[string]any{"spec": map[string]any{"replicas": 1}}, nil); code >= 300 {
			return fmt.Errorf("PUT a widget: %d", code) // 503 until registered
		}
		return nil
	})
	return c
}

// clusterSeries returns the metric names on /metrics of every node of c, with the
// nodes that export each.
func clusterSeries(c *gossipCluster) (map[string][]string, error) {
	have := map[string][]string{}
	for _, a := range c.agents {
		cl, err := client.New([]string{a.HTTPAddr()}, client.Options{})
		if err != nil {
			return nil, err
		}
		text, err := cl.Metrics(context.Background())
		cl.Close()
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(string(text), "\n") {
			if l == "" || l[0] == '#' {
				continue
			}
			if i := strings.IndexAny(l, "{ "); i > 0 {
				have[l[:i]] = append(have[l[:i]], a.NodeID())
			}
		}
	}
	return have, nil
}

// missingSeries lists the names of want that no node of c exports.
func missingSeries(c *gossipCluster, want map[string][]string) error {
	have, err := clusterSeries(c)
	if err != nil {
		return err
	}
	var missing []string
	for m, users := range want {
		if len(have[m]) == 0 {
			missing = append(missing, fmt.Sprintf("%s (%s)", m, strings.Join(users, ", ")))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("no node exports %v", missing)
	}
	return nil
}

// dashboardAndAlertSeries is every series the Grafana dashboard and the alert rules
// read, with who reads it, plus the etcd-named series of etcd's mixin (a node serving
// the etcd API exports them).
func dashboardAndAlertSeries(t *testing.T) map[string][]string {
	want := alertSeries(t)
	for _, m := range dashboardMetrics(t) {
		want[m] = append(want[m], "dashboard")
	}
	for _, m := range []string{"etcd_server_has_leader", "etcd_server_leader_changes_seen_total",
		"etcd_disk_wal_fsync_duration_seconds_bucket", "etcd_disk_backend_commit_duration_seconds_bucket",
		"etcd_mvcc_db_total_size_in_bytes", "etcd_server_quota_backend_bytes",
		"etcd_network_peer_sent_failures_total", "etcd_network_peer_round_trip_time_seconds_bucket",
		"etcd_server_proposals_committed_total", "etcd_server_proposals_applied_total",
		"etcd_server_proposals_pending", "etcd_server_proposals_failed_total",
		"grpc_server_started_total", "grpc_server_handled_total", "grpc_server_handling_seconds_bucket"} {
		want[m] = append(want[m], "etcd mixin")
	}
	return want
}

// TestDashboardAndAlertSeries: every series docs/grafana-dashboard.json and
// docs/alerts/keel-alerts.yml read is on /metrics of a live 3-node cluster, right
// after start and — with KEEL_METRICS_SOAK set (make test-metrics, in CI) — still two
// minutes later, past the minute after which go-metrics' Prometheus sink used to drop
// idle gauges (issue #38). The wait stays out of make test, which must stay short.
func TestDashboardAndAlertSeries(t *testing.T) {
	want := dashboardAndAlertSeries(t)
	c := startMetricsCluster(t)
	waitFor(t, "every dashboard and alert series", 20*time.Second, func() error { return missingSeries(c, want) })
	checkNamingConventions(t, c)
	if os.Getenv("KEEL_METRICS_SOAK") == "" {
		return
	}
	time.Sleep(2 * time.Minute)
	if err := missingSeries(c, want); err != nil {
		t.Fatalf("two minutes on: %v", err)
	}
}

// checkNamingConventions checks keel's series on every node of c against Prometheus'
// conventions (issue #38 found camelCase, summaries and node IDs in names): snake_case,
// counters end in _total and nothing else does, no summaries, no node ID in a name,
// help text that says more than the name.
func checkNamingConventions(t *testing.T, c *gossipCluster) {
	t.Helper()
	snake := regexp.MustCompile(`^keel_[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	families := 0
	defer func() {
		if families < 3*30 {
			t.Errorf("%d keel families checked on 3 nodes: not what this check expects", families)
		}
	}()
	for _, a := range c.agents {
		cl, err := client.New([]string{a.HTTPAddr()}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		text, err := cl.Metrics(context.Background())
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(text), "\n") {
			f := strings.Fields(l)
			if len(f) < 4 || f[0] != "#" || !strings.HasPrefix(f[2], "keel_") {
				continue
			}
			name := f[2]
			switch f[1] {
			case "TYPE":
				families++
				typ := f[3]
				switch {
				case !snake.MatchString(name):
					t.Errorf("%s: not snake_case", name)
				case typ == "summary":
					t.Errorf("%s: a summary (it cannot be aggregated across nodes): use a histogram", name)
				case typ == "counter" && !strings.HasSuffix(name, "_total"):
					t.Errorf("%s: a counter without _total", name)
				case typ != "counter" && strings.HasSuffix(name, "_total"):
					t.Errorf("%s: a %s named like a counter", name, typ)
				}
				for _, b := range c.agents {
					if strings.Contains(name, "_"+b.NodeID()) {
						t.Errorf("%s: a node ID in the name: make it a label", name)
					}
				}
			case "HELP":
				help := strings.Join(f[3:], " ")
				if strings.EqualFold(strings.ReplaceAll(help, " ", "_"), name) || len(help) < 12 {
					t.Errorf("%s: help %q says no more than the name", name, help)
				}
			}
		}
	}
}
