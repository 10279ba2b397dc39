package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

func TestRenderTop(t *testing.T) {
	f := topFrame{
		Addr:   "127.0.0.1:7370",
		Now:    time.Date(2026, 11, 23, 12, 0, 5, 0, time.UTC),
		Status: &api.StatusResponse{Revision: 2510, CompactRevision: 2400},
		Members: []api.MemberInfo{
			{ID: "n1", HTTPAddr: "h1", Gossip: "alive", Suffrage: "Voter", Leader: true, Release: "v0.9.0", AppliedIdx: 2530},
			{ID: "n2", HTTPAddr: "h2", Gossip: "alive", Suffrage: "Voter", Release: "v0.9.0", AppliedIdx: 2527, TrailingBy: 3},
			{ID: "a-very-long-node-name", HTTPAddr: "h3", Gossip: "dead", Suffrage: "Nonvoter", Release: "v0.10.0-rc.1+dirty"},
		},
		Nodes: map[string]nodeRates{
			"h1": {WritesPerSec: 512, P99: 3100 * time.Microsecond},
			"h2": {WritesPerSec: 0},
			"h3": {Err: errors.New("connection refused")},
		},
		Migrations: []api.MigrationStatus{{Resource: "apps/widgets", State: api.MigrationRunning, PassScanned: 45000,
			Total: 100000, ObjectsPerSecond: 1998, ETASeconds: 27}},
	}
	var b bytes.Buffer
	renderTop(&b, f)
	want := `keel top  127.0.0.1:7370  revision 2510  compacted at 2400  12:00:05

NODE         ROLE      HEALTH RELEASE      APPLIED    LAG  WRITES/S      P99
n1           leader    alive  v0.9.0          2530      0     512.0    3.1ms
n2           follower  alive  v0.9.0          2527      3       0.0        -
a-very-long~ nonvoter  dead   v0.10.0-~          -      -         -        -
cluster                                                        512.0

MIGRATIONS
apps/widgets       [#########...........]  45% 45k/100k 2.0k/s ETA 27s
`
	if got := b.String(); got != want {
		t.Errorf("frame:\n%s\nwant:\n%s", got, want)
	}
	for i, l := range strings.Split(b.String(), "\n") {
		if n := len([]rune(l)); n > 79 {
			t.Errorf("line %d is %d columns: %q", i, n, l)
		}
	}
	// Without an answer, the frame says why.
	b.Reset()
	renderTop(&b, topFrame{Addr: "x:1", Err: errors.New("keel: 503 NoLeader: no leader")})
	if !strings.Contains(b.String(), "error: keel: 503 NoLeader") {
		t.Errorf("error frame:\n%s", b.String())
	}
}

func TestScrapeRates(t *testing.T) {
	t0 := time.Unix(100, 0)
	before := parseScrape([]byte(`# HELP keel_http_requests_total x
keel_http_requests_total{code="200",method="PUT",route="PUT /v1/kv/{key...}"} 100
keel_http_requests_total{code="200",method="GET",route="GET /v1/kv/{key...}"} 50
keel_http_requests_total{code="200",method="POST",route="POST /v1/agent/leave"} 1
keel_stream_requests_total{code="200",op="put"} 10
keel_http_request_duration_seconds_bucket{method="PUT",route="PUT /v1/kv/{key...}",le="0.001"} 100
keel_http_request_duration_seconds_bucket{method="PUT",route="PUT /v1/kv/{key...}",le="0.005"} 150
keel_http_request_duration_seconds_bucket{method="PUT",route="PUT /v1/kv/{key...}",le="+Inf"} 150
keel_http_request_duration_seconds_bucket{method="GET",route="GET /metrics",le="+Inf"} 7
`), t0)
	after := parseScrape([]byte(`keel_http_requests_total{code="200",method="PUT",route="PUT /v1/kv/{key...}"} 300
keel_http_requests_total{code="200",method="GET",route="GET /v1/kv/{key...}"} 450
keel_http_requests_total{code="200",method="POST",route="POST /v1/agent/leave"} 9
keel_stream_requests_total{code="200",op="put"} 210
keel_stream_requests_total{code="200",op="get"} 999
keel_http_request_duration_seconds_bucket{method="PUT",route="PUT /v1/kv/{key...}",le="0.001"} 890
keel_http_request_duration_seconds_bucket{method="PUT",route="PUT /v1/kv/{key...}",le="0.005"} 940
keel_http_request_duration_seconds_bucket{method="PUT",route="PUT /v1/kv/{key...}",le="+Inf"} 950
keel_http_request_duration_seconds_bucket{method="GET",route="GET /metrics",le="+Inf"} 9000
`), t0.Add(2*time.Second))
	r := after.ratesSince(before)
	if r.WritesPerSec != 200 { // (200 HTTP + 200 stream writes) / 2s
		t.Errorf("writes/s = %v, want 200", r.WritesPerSec)
	}
	// 800 data requests in the interval (GET /metrics does not count): 790 within 1ms,
	// 790 within 5ms, 800 in all, so the 99th percentile (792) is in the +Inf bucket,
	// shown as the largest finite bound.
	if r.P99 != 5*time.Millisecond {
		t.Errorf("p99 = %v, want 5ms", r.P99)
	}
}

// TestTopWithoutTerminal: `keel top` into a pipe or a file writes plain frames one
// after the other, separated by a blank line — no cursor or clear-screen escapes.
func TestTopWithoutTerminal(t *testing.T) {
	addr := startCLINode(t, kv.ACLAllow)
	cliUntil(t, "put", "-addr", addr, "k", "v")
	root := newCLI()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(normalizeArgs(root, []string{"top", "-addr", addr}))
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, "\x1b") {
		t.Errorf("keel top into a buffer wrote escapes:\n%q", got)
	}
	if n := strings.Count(got, "\n\nkeel top  "); n < 1 || !strings.HasPrefix(got, "keel top  ") {
		t.Errorf("keel top into a buffer: want frames separated by a blank line, got:\n%s", got)
	}
}
