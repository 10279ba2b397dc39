package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

func newTopCmd() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of the cluster: members, lag, writes/s, p99, revision, migrations",
		Long: `A live view of the cluster, redrawn every second until Ctrl-C: each member with its
role, gossip health, release, applied index and lag; each node's writes per second and
99th-percentile request latency over the last interval (from its /metrics); the
revision and the compaction point; and a progress bar per storage-version migration.
It fits an 80-column terminal. Each node's /metrics is read with the same CA,
certificate, key and token as every other command. With -o json (or yaml) each frame
is one JSON object per line (a YAML list item), and the screen is not cleared; nor is
it when the output is not a terminal (a pipe, a file): frames follow each other,
separated by a blank line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			scrapeOpts, err := scrapeOptions()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			w := cmd.OutOrStdout()
			return runTop(ctx, c, scrapeOpts, w, topMode{once: once, redraw: !once && isTerminal(w)})
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "draw one frame (after one second of measuring) and exit")
	return cmd
}

// topWidth keeps every line of `keel top` readable on an 80-column terminal.
const topWidth = 79

// topFrame is what one frame of `keel top` shows.
type topFrame struct {
	Addr       string
	Now        time.Time
	Status     *api.StatusResponse
	Members    []api.MemberInfo
	Nodes      map[string]nodeRates // by HTTP address
	Migrations []api.MigrationStatus
	Err        error
}

// nodeRates is one node's load over the last interval, from two scrapes of /metrics.
type nodeRates struct {
	WritesPerSec float64
	P99          time.Duration // 0: no request in the interval
	Err          error
}

// renderTop draws one frame. It depends on nothing but f, so it is tested with fixed
// input.
func renderTop(w io.Writer, f topFrame) {
	var lines []string
	add := func(format string, args ...any) {
		lines = append(lines, fitLine(fmt.Sprintf(format, args...), topWidth))
	}
	head := "keel top  " + f.Addr
	if st := f.Status; st != nil {
		head += fmt.Sprintf("  revision %d", st.Revision)
		if st.CompactRevision > 0 {
			head += fmt.Sprintf("  compacted at %d", st.CompactRevision)
		}
	}
	if !f.Now.IsZero() {
		head += "  " + f.Now.Format("15:04:05")
	}
	add("%s", head)
	if f.Err != nil {
		add("error: %v", f.Err)
	}
	add("")
	add("%-12s %-9s %-6s %-9s %10s %6s %9s %8s", "NODE", "ROLE", "HEALTH", "RELEASE", "APPLIED", "LAG", "WRITES/S", "P99")
	var total float64
	for _, m := range f.Members {
		role := "follower"
		switch {
		case m.Leader:
			role = "leader"
		case m.Suffrage == "Nonvoter":
			role = "nonvoter"
		case m.Suffrage == "none":
			role = "-"
		}
		applied, lag := "-", "-"
		if m.AppliedIdx > 0 {
			applied, lag = strconv.FormatUint(m.AppliedIdx, 10), strconv.FormatUint(m.TrailingBy, 10)
		}
		wps, p99 := "-", "-"
		if r, ok := f.Nodes[m.HTTPAddr]; ok && r.Err == nil {
			wps = strconv.FormatFloat(r.WritesPerSec, 'f', 1, 64)
			total += r.WritesPerSec
			if r.P99 > 0 {
				p99 = shortDuration(r.P99)
			}
		}
		add("%-12s %-9s %-6s %-9s %10s %6s %9s %8s", clip(m.ID, 12), role, clip(m.Gossip, 6), clip(dash(m.Release), 9),
			applied, lag, wps, p99)
	}
	if len(f.Nodes) > 0 {
		add("%-58s %9s", "cluster", strconv.FormatFloat(total, 'f', 1, 64))
	}
	if len(f.Migrations) > 0 {
		add("")
		add("MIGRATIONS")
		for _, l := range progressLines(f.Migrations, topWidth) {
			add("%s", l)
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "~"
	}
	return s
}

// shortDuration is a latency in at most 7 characters: 850µs, 3.1ms, 1.25s.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// topMode is how `keel top` draws: once (one frame, then exit), and redraw (each
// frame replaces the last on a terminal; elsewhere frames follow each other).
type topMode struct{ once, redraw bool }

// runTop draws a frame every second until ctx is done (once: one frame).
func runTop(ctx context.Context, c *client.Client, scrapeOpts client.Options, w io.Writer, mode topMode) error {
	prev := map[string]scrape{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for frame := 0; ; frame++ {
		f := collectTop(ctx, c, scrapeOpts, prev)
		if ctx.Err() != nil {
			return nil
		}
		if frame > 0 || !mode.once { // once: the first frame has no rates yet
			if err := drawTop(w, f, mode, frame > 0); err != nil || mode.once {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// drawTop writes one frame: a redrawn screen, a plain snapshot (after a blank line
// unless it is the first), or with -o json/yaml one record.
func drawTop(w io.Writer, f topFrame, mode topMode, drawnBefore bool) error {
	if structured() {
		err := printValueLine(w, topRecord(f))
		if mode.once {
			return errors.Join(err, f.Err)
		}
		return err
	}
	var b bytes.Buffer
	switch {
	case mode.redraw:
		b.WriteString("\x1b[H\x1b[2J") // home, clear
	case drawnBefore && !mode.once:
		b.WriteString("\n")
	}
	renderTop(&b, f)
	_, err := w.Write(b.Bytes())
	if mode.once {
		return errors.Join(err, f.Err)
	}
	return err
}

// topNode is one member's line of `keel top -o json`.
type topNode struct {
	api.MemberInfo
	WritesPerSec *float64 `json:"writes_per_sec,omitempty"`
	P99Seconds   *float64 `json:"p99_seconds,omitempty"`
	ScrapeError  string   `json:"scrape_error,omitempty"`
}

// topJSON is one frame of `keel top -o json`.
type topJSON struct {
	Addr            string                `json:"addr"`
	Time            time.Time             `json:"time"`
	Revision        int64                 `json:"revision"`
	CompactRevision int64                 `json:"compact_revision"`
	Members         []topNode             `json:"members"`
	Migrations      []api.MigrationStatus `json:"migrations,omitempty"`
	Error           string                `json:"error,omitempty"`
}

func topRecord(f topFrame) topJSON {
	r := topJSON{Addr: f.Addr, Time: f.Now, Migrations: f.Migrations, Members: []topNode{}}
	if f.Status != nil {
		r.Revision, r.CompactRevision = f.Status.Revision, f.Status.CompactRevision
	}
	if f.Err != nil {
		r.Error = f.Err.Error()
	}
	for _, m := range f.Members {
		n := topNode{MemberInfo: m}
		if rt, ok := f.Nodes[m.HTTPAddr]; ok {
			if rt.Err != nil {
				n.ScrapeError = rt.Err.Error()
			} else {
				wps, p99 := rt.WritesPerSec, rt.P99.Seconds()
				n.WritesPerSec, n.P99Seconds = &wps, &p99
			}
		}
		r.Members = append(r.Members, n)
	}
	return r
}

// collectTop asks the cluster for one frame; prev holds each node's last scrape and
// is updated.
func collectTop(ctx context.Context, c *client.Client, scrapeOpts client.Options, prev map[string]scrape) topFrame {
	ctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond)
	defer cancel()
	f := topFrame{Addr: global.addr, Now: time.Now(), Nodes: map[string]nodeRates{}}
	var err error
	if f.Status, err = c.Status(ctx); err != nil {
		f.Err = err
		return f
	}
	if f.Members, err = c.Members(ctx); err != nil {
		f.Err = err
	}
	f.Migrations, _ = c.Migrations(ctx) // none, or a release without the migrator
	for i, m := range f.Members {
		if m.HTTPAddr == "" && m.ID == f.Status.NodeID && !strings.Contains(global.addr, ",") {
			f.Members[i].HTTPAddr = global.addr // no gossip to tell it, but -addr is this node's
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range f.Members {
		if m.HTTPAddr == "" {
			continue
		}
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			s, err := scrapeNode(ctx, addr, scrapeOpts)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				f.Nodes[addr] = nodeRates{Err: err}
				return
			}
			if p, ok := prev[addr]; ok {
				f.Nodes[addr] = s.ratesSince(p)
			}
			prev[addr] = s
		}(m.HTTPAddr)
	}
	wg.Wait()
	return f
}

// scrapeOptions are the client settings of a /metrics scrape: the CLI's TLS files and
// token (a secure cluster answers /metrics only to them), and no retries.
func scrapeOptions() (client.Options, error) {
	tlsCfg, err := clientTLS()
	if err != nil {
		return client.Options{}, err
	}
	return client.Options{MaxRetries: -1, TLS: tlsCfg, Token: global.token}, nil
}

func scrapeNode(ctx context.Context, addr string, opts client.Options) (scrape, error) {
	nc, err := client.New([]string{addr}, opts)
	if err != nil {
		return scrape{}, err
	}
	defer nc.Close()
	text, err := nc.Metrics(ctx)
	if err != nil {
		return scrape{}, err
	}
	return parseScrape(text, time.Now()), nil
}

// scrape is what `keel top` reads of one /metrics answer: requests of the data API
// that write (HTTP PUT, POST and DELETE; stream puts and deletes) and the latency
// histogram of every data request, HTTP and stream, summed over routes.
type scrape struct {
	at      time.Time
	writes  float64
	buckets map[float64]float64 // upper bound → cumulative count
}

// parseScrape reads the Prometheus text format, keeping only keel's request metrics.
func parseScrape(text []byte, at time.Time) scrape {
	s := scrape{at: at, buckets: map[float64]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := splitSample(line)
		if !ok {
			continue
		}
		if strings.HasPrefix(name, "keel_http_") && !dataRoute(labels["route"]) {
			continue // operator routes, /metrics and top's own requests
		}
		switch name {
		case "keel_http_requests_total":
			switch labels["method"] {
			case "PUT", "POST", "DELETE":
				s.writes += value
			}
		case "keel_stream_requests_total":
			if op := labels["op"]; op != "get" && op != "" {
				s.writes += value
			}
		case "keel_http_request_duration_seconds_bucket", "keel_stream_request_duration_seconds_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err == nil {
				s.buckets[le] += value
			}
		}
	}
	return s
}

// dataRoute reports whether an HTTP route label (the mux pattern) is one of the data
// API's: keys, transactions, compaction, typed resources.
func dataRoute(route string) bool {
	for _, p := range []string{api.PathKV, api.PathTxn, api.PathCompact, "/apis/"} {
		if strings.Contains(route, p) {
			return true
		}
	}
	return false
}

// splitSample splits `name{a="x",b="y"} 12.5` into its parts.
func splitSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	labels = map[string]string{}
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", nil, 0, false
		}
		name, rest = line[:i], line[j+1:]
		for _, kv := range strings.Split(line[i+1:j], ",") {
			k, v, found := strings.Cut(kv, "=")
			if found {
				labels[k] = strings.Trim(v, `"`)
			}
		}
	} else {
		var found bool
		name, rest, found = strings.Cut(line, " ")
		if !found {
			return "", nil, 0, false
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return name, labels, v, err == nil
}

// ratesSince is the load between p and s: writes per second and the p99 of the
// requests in the interval (the upper bound of the bucket that holds it).
func (s scrape) ratesSince(p scrape) nodeRates {
	dt := s.at.Sub(p.at).Seconds()
	if dt <= 0 {
		return nodeRates{}
	}
	r := nodeRates{WritesPerSec: math.Max(0, s.writes-p.writes) / dt}
	bounds := make([]float64, 0, len(s.buckets))
	for le := range s.buckets {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return r
	}
	total := s.buckets[bounds[len(bounds)-1]] - p.buckets[bounds[len(bounds)-1]]
	if total <= 0 {
		return r
	}
	for _, le := range bounds {
		if s.buckets[le]-p.buckets[le] >= 0.99*total {
			if !math.IsInf(le, 1) {
				r.P99 = time.Duration(le * float64(time.Second))
			} else if len(bounds) > 1 {
				r.P99 = time.Duration(bounds[len(bounds)-2] * float64(time.Second))
			}
			break
		}
	}
	return r
}
