package main

import (
	"fmt"
	"math"
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
		{name: "write, 1 client", unit: "ops/s", value: stat("write1", opsPerSec)},
		{name: "write, 1 client p50", unit: "ms", value: stat("write1", p50), lower: true},
		{name: "write, 1 client p99", unit: "ms", value: stat("write1", p99), lower: true},
		{name: fmt.Sprintf("write, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("write%d", c), opsPerSec), target: 1.5},
		{name: fmt.Sprintf("write, %d clients p50", c), unit: "ms", value: stat(fmt.Sprintf("write%d", c), p50), lower: true},
		{name: fmt.Sprintf("write, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("write%d", c), p99), lower: true, target: 1.0},
		{name: "linearizable read, 1 client", unit: "ops/s", value: stat("linread1", opsPerSec)},
		{name: fmt.Sprintf("linearizable read, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("linread%d", c), opsPerSec), target: 1.5},
		{name: fmt.Sprintf("linearizable read, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("linread%d", c), p99), lower: true},
		{name: "serializable read, 1 client", unit: "ops/s", value: stat("serread1", opsPerSec)},
		{name: fmt.Sprintf("serializable read, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("serread%d", c), opsPerSec), target: 2.0},
		{name: fmt.Sprintf("serializable read, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("serread%d", c), p99), lower: true},
		{name: fmt.Sprintf("mixed 80/20, %d clients", c), unit: "ops/s", value: stat(fmt.Sprintf("mixed%d", c), opsPerSec)},
		{name: fmt.Sprintf("mixed 80/20, %d clients p99", c), unit: "ms", value: stat(fmt.Sprintf("mixed%d", c), p99), lower: true},
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
		row{name: fmt.Sprintf("write p99 before compaction, %d clients", cc), unit: "ms", value: stat("compact_before", p99), lower: true},
		row{name: fmt.Sprintf("write p99 during compaction of %s versions", human(cfg.compactVersions)), unit: "ms", value: stat("compact_during", p99), lower: true},
		row{name: "write p99 during/before compaction", unit: "×", value: metric("compact.p99_ratio"), lower: true, target: 1.2, onKeel: true},
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

// renderTable prints the markdown table: workload | keel | etcd | ratio | target | met?
// ratio is keel/etcd; targets are on the ratio unless the row says "keel ≤".
func renderTable(cfg suiteConfig, keel, etcd *Results) (string, int, int) {
	var b strings.Builder
	b.WriteString("| workload | keel | etcd | ratio keel/etcd | target | met? |\n")
	b.WriteString("| --- | ---: | ---: | ---: | --- | --- |\n")
	met, total := 0, 0
	for _, r := range tableRows(cfg) {
		k, e := r.value(keel), r.value(etcd)
		ratio := k / e
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
		fmt.Fprintf(&b, "| %s (%s) | %s | %s | %s | %s | %s |\n", r.name, r.unit, fmtVal(k), fmtVal(e), fmtRatio(ratio), target, ok)
	}
	fmt.Fprintf(&b, "\n%d of %d targets met.\n", met, total)
	return b.String(), met, total
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", r)
}
