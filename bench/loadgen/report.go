package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// row is one line of the comparison table. value extracts the figure from one
// system's results (NaN when missing). Lower-is-better rows compare with ≤.
type row struct {
	name   string
	unit   string
	value  func(r *Results) float64
	lower  bool    // lower is better (latency, memory, time)
	target float64 // 0 = no target
	onKeel bool    // the target applies to keel's own figure, not to the ratio
	stat   string  // the load run the figure comes from ("" for a metric)
}

func stat(name string, f func(Stats) float64) func(*Results) float64 {
	return func(r *Results) float64 {
		st, ok := r.Stats[name]
		if !ok || st.Ops == 0 {
			return math.NaN()
		}
		return f(st)
	}
}

func metric(name string) func(*Results) float64 {
	return func(r *Results) float64 {
		v, ok := r.Metrics[name]
		if !ok {
			return math.NaN()
		}
		return v
	}
}

func opsPerSec(s Stats) float64 { return s.OpsPerSec }
func p50(s Stats) float64       { return s.P50Ms }
func p99(s Stats) float64       { return s.P99Ms }

func tableRows(cfg suiteConfig) []row {
	c := cfg.clients
	rows := []row{
		{name: "write, 1 client", unit: "ops/s", value: stat("write1", opsPerSec), stat: "write1"},
		{name: "write, 1 client p50", unit: "ms", value: stat("write1", p50), stat: "write1", lower: true},
		{name: "write, 1 client p99", unit: "ms", value: stat("write1", p99), stat: "write1", lower: true},
		{name: fmt.Sprintf("write, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("write%d", c), opsPerSec), stat: fmt.Sprintf("write%d", c), target: 1.5},
		{name: fmt.Sprintf("write, %d clients p50", c), unit: "ms", value: stat(fmt.Sprintf("write%d", c), p50), stat: fmt.Sprintf("write%d", c), lower: true},
		{name: fmt.Sprintf("write, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("write%d", c), p99), stat: fmt.Sprintf("write%d", c), lower: true, target: 1.0},
		{name: "linearizable read, 1 client", unit: "ops/s", value: stat("linread1", opsPerSec), stat: "linread1"},
		{name: fmt.Sprintf("linearizable read, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("linread%d", c), opsPerSec), stat: fmt.Sprintf("linread%d", c), target: 1.5},
		{name: fmt.Sprintf("linearizable read, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("linread%d", c), p99), stat: fmt.Sprintf("linread%d", c), lower: true},
		{name: "serializable read, 1 client", unit: "ops/s", value: stat("serread1", opsPerSec), stat: "serread1"},
		{name: fmt.Sprintf("serializable read, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("serread%d", c), opsPerSec), stat: fmt.Sprintf("serread%d", c), target: 2.0},
		{name: fmt.Sprintf("serializable read, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("serread%d", c), p99), stat: fmt.Sprintf("serread%d", c), lower: true},
		{name: fmt.Sprintf("mixed 80/20, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("mixed%d", c), opsPerSec), stat: fmt.Sprintf("mixed%d", c)},
		{name: fmt.Sprintf("mixed 80/20, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("mixed%d", c), p99), stat: fmt.Sprintf("mixed%d", c), lower: true},
		{name: fmt.Sprintf("lease grant, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("leasegrant%d", c), opsPerSec), stat: fmt.Sprintf("leasegrant%d", c), target: 2.0},
		{name: fmt.Sprintf("lease keepalive (%d leases), %d clients", leaseKept, c), unit: "ops/s", value: stat(fmt.Sprintf("keepalive%d", c), opsPerSec), stat: fmt.Sprintf("keepalive%d", c), target: 2.0},
	}
	for _, l := range cfg.scanLimits {
		r := row{name: fmt.Sprintf("paged scan %dk keys, limit %d", cfg.scanKeys/1000, l), unit: "keys/s", value: metric(fmt.Sprintf("scan%d.keys_per_sec", l))}
		if l == 500 {
			r.target = 10
		}
		rows = append(rows, r)
	}
	cc := cfg.compactClients
	rows = append(rows,
		row{name: fmt.Sprintf("write p99 before compaction, %d clients", cc), unit: "ms", value: stat("compact_before", p99), stat: "compact_before", lower: true},
		row{name: fmt.Sprintf("write p99 during compaction of %s versions", human(cfg.compactVersions)), unit: "ms", value: stat("compact_during", p99), stat: "compact_during", lower: true},
		row{name: "write p99 during/before compaction", unit: "×", value: metric("compact.p99_ratio"), lower: true, target: 1.2, onKeel: true},
		row{name: fmt.Sprintf("watch fan-out, 1 writer back to back, %s watchers: events delivered", human(cfg.watchers)), unit: "events/s", value: metric("watch.b2b.events_per_sec")},
		row{name: fmt.Sprintf("watch fan-out, 1 writer back to back, %s watchers: delivery p99", human(cfg.watchers)), unit: "ms", value: metric("watch.b2b.p99_ms"), lower: true},
		row{name: fmt.Sprintf("watch fan-out, 1 writer (16 in flight), %s watchers: events delivered", human(cfg.watchers)), unit: "events/s", value: metric("watch.w16.events_per_sec")},
		row{name: fmt.Sprintf("watch fan-out, 1 writer (16 in flight), %s watchers: delivery p99", human(cfg.watchers)), unit: "ms", value: metric("watch.w16.p99_ms"), lower: true},
		row{name: fmt.Sprintf("watch fan-out, 1 writer (%d in flight), %s watchers: events delivered", max(1, cfg.watchInflight), human(cfg.watchers)), unit: "events/s", value: metric("watch.events_per_sec"), target: 2.0},
		row{name: fmt.Sprintf("watch fan-out, 1 writer (%d in flight), %s watchers: delivery p99", max(1, cfg.watchInflight), human(cfg.watchers)), unit: "ms", value: metric("watch.p99_ms"), lower: true, target: 1.0},
		row{name: "watch memory: leader RSS growth per 10k idle watchers", unit: "MiB", value: metric("watch.idle_mb_per_10k"), lower: true, target: 1.0},
		row{name: fmt.Sprintf("RSS per node, %s keys (max of 3)", human(cfg.memKeys)), unit: "MiB", value: metric("rss.max_mb"), lower: true, target: 1.0},
		row{name: fmt.Sprintf("new member join + catch-up, %s keys", human(cfg.memKeys)), unit: "s", value: metric("join.catchup_s"), lower: true},
	)
	return rows
}

func human(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func fmtVal(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// renderTable prints the markdown table from every run of each system (rounds run
// interleaved: etcd, keel, etcd, keel...). A system's figure is its worst run (the
// lowest throughput, the highest latency); "runs" lists every run with the spread
// (max − min over the median); "errors" is each run's failed operations. The ratio is
// keel/etcd per round, and its worst round is what the target is checked on: a target
// is met only if every round meets it. Rows whose target is on keel's own figure use
// keel's worst run.
func renderTable(cfg suiteConfig, keel, etcd []*Results) (string, int, int) {
	var b strings.Builder
	b.WriteString("| workload | keel (worst) | etcd (worst) | ratio keel/etcd (worst round) | target | met? | keel runs | etcd runs | errors per run keel / etcd |\n")
	b.WriteString("| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |\n")
	met, total := 0, 0
	for _, r := range tableRows(cfg) {
		ks, es := values(r, keel), values(r, etcd)
		k, e := worst(ks, r.lower), worst(es, r.lower)
		var ratios []float64
		for i := 0; i < len(ks) && i < len(es); i++ {
			ratios = append(ratios, ks[i]/es[i])
		}
		ratio := worst(ratios, r.lower)
		target, ok := "", ""
		if r.target > 0 {
			total++
			cmp := "≥"
			if r.lower {
				cmp = "≤"
			}
			subject := ratio
			if r.onKeel {
				target = fmt.Sprintf("keel %s %.1f×", cmp, r.target)
				subject = k
			} else {
				target = fmt.Sprintf("%s %.1f×", cmp, r.target)
			}
			good := subject >= r.target
			if r.lower {
				good = subject <= r.target
			}
			switch {
			case math.IsNaN(subject):
				ok = "no (not measured)"
			case good:
				ok = "yes"
				met++
			default:
				ok = "**no**"
			}
		}
		fmt.Fprintf(&b, "| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s / %s |\n", r.name, r.unit, fmtVal(k), fmtVal(e),
			fmtRatio(ratio), target, ok, fmtRuns(ks), fmtRuns(es), fmtErrors(r, keel), fmtErrors(r, etcd))
	}
	fmt.Fprintf(&b, "\n%d of %d targets met (each by the worst of %d keel and %d etcd runs).\n", met, total, len(keel), len(etcd))
	return b.String(), met, total
}

// values is the row's figure in every run, in run order (NaN where not measured).
func values(r row, runs []*Results) []float64 {
	out := make([]float64, len(runs))
	for i, res := range runs {
		out[i] = r.value(res)
	}
	return out
}

// worst is the lowest of vs, or the highest when lower is better; NaN when any run is
// NaN or there is none (a run that did not measure the figure cannot meet a target).
func worst(vs []float64, lower bool) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	w := vs[0]
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return math.NaN()
		}
		if lower && v > w || !lower && v < w {
			w = v
		}
	}
	return w
}

// fmtRuns lists every run's figure and the spread: (max − min) / median.
func fmtRuns(vs []float64) string {
	parts := make([]string, len(vs))
	var ok []float64
	for i, v := range vs {
		parts[i] = fmtVal(v)
		if !math.IsNaN(v) {
			ok = append(ok, v)
		}
	}
	s := strings.Join(parts, ", ")
	if len(vs) == 0 {
		return "not run"
	}
	if len(ok) < 2 {
		return s
	}
	sort.Float64s(ok)
	median := ok[len(ok)/2]
	if len(ok)%2 == 0 {
		median = (ok[len(ok)/2-1] + ok[len(ok)/2]) / 2
	}
	if median == 0 {
		return s
	}
	return fmt.Sprintf("%s (spread %.0f%%)", s, 100*(ok[len(ok)-1]-ok[0])/median)
}

// fmtErrors lists the failed operations of the row's run in every run ("–" for rows
// that are not a load run).
func fmtErrors(r row, runs []*Results) string {
	if r.stat == "" {
		return "–"
	}
	if len(runs) == 0 {
		return "not run"
	}
	parts := make([]string, len(runs))
	for i, res := range runs {
		st, ok := res.Stats[r.stat]
		if !ok {
			parts[i] = "n/a"
			continue
		}
		parts[i] = fmt.Sprint(st.Errors)
	}
	return strings.Join(parts, ", ")
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", r)
}
