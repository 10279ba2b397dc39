// Command loadgen drives etcd (through its native gRPC client, clientv3) and keel
// (through its native HTTP API) with the same workloads, shapes and concurrency, on
// 3-node clusters it starts on loopback, and prints the two side by side.
//
//	loadgen compare -etcd-bin /usr/bin/etcd -keel-bin bin/keel -work /tmp/x -out bench/results/RUN
//	loadgen report -out bench/results/RUN
//
// It lives in its own module so etcd's client never enters keel's go.mod.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	log.SetFlags(log.Ltime)
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen compare|report|readme|starve|commit1 [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "compare":
		err = compareCmd(os.Args[2:])
	case "report":
		err = reportCmd(os.Args[2:])
	case "readme":
		err = readmeCmd(os.Args[2:])
	case "starve":
		err = starveCmd(os.Args[2:])
	case "commit1":
		err = commit1Cmd(os.Args[2:])
	case rttEchoCmd: // commit1's round-trip peer, a process of its own
		err = rttEcho(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want compare, report, readme, starve or commit1)", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

// runConfig is the JSON-saved part of the suite config that the report needs.
type runConfig struct {
	Clients         int   `json:"clients"`
	ScanKeys        int   `json:"scan_keys"`
	ScanLimits      []int `json:"scan_limits"`
	CompactVersions int   `json:"compact_versions"`
	CompactClients  int   `json:"compact_clients"`
	MemKeys         int   `json:"mem_keys"`
	Watchers        int   `json:"watchers,omitempty"`
	IdleWatchers    int   `json:"idle_watchers,omitempty"`
	WatchInflight   int   `json:"watch_inflight,omitempty"`
}

func (c runConfig) suite() suiteConfig {
	s := defaultSuiteConfig()
	s.clients, s.scanKeys, s.scanLimits = c.Clients, c.ScanKeys, c.ScanLimits
	s.compactVersions, s.compactClients, s.memKeys = c.CompactVersions, c.CompactClients, c.MemKeys
	if c.Watchers > 0 {
		s.watchers, s.idleWatchers = c.Watchers, c.IdleWatchers
	}
	if c.WatchInflight > 0 {
		s.watchInflight = c.WatchInflight
	}
	return s
}

func compareCmd(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	systems := fs.String("systems", "etcd,keel", "systems to run, in order")
	rounds := fs.Int("rounds", 2, "run every system this many times, interleaved (etcd, keel, etcd, keel); a target is met only by the worst run")
	etcdBin := fs.String("etcd-bin", "/usr/bin/etcd", "etcd server binary")
	keelBin := fs.String("keel-bin", "bin/keel", "keel binary")
	work := fs.String("work", "", "scratch dir for data dirs and node logs (required)")
	out := fs.String("out", "", "results dir (required)")
	pidFile := fs.String("pids", "", "append each started server's PID to this file")
	conns := fs.Int("etcd-conns", 4, "gRPC connections per etcd member (and per keel member with -keel-protocol etcd)")
	useTLS := fs.Bool("tls", false, "run both systems with TLS on client and peer ports and client certificates required, "+
		"certificates made by keel tls (same scheme for both); otherwise plain text (keel -insecure)")
	keelProto := fs.String("keel-protocol", "stream", "how keel's single-key reads and writes travel: stream, http (HTTP/1.1) or h2c (HTTP/2 cleartext); "+
		"etcd: every workload through keel's etcd v3 door (-etcd-addr) with the etcd runs' clientv3 driver")
	etcdProto := fs.String("etcd-protocol", "grpc", "how etcd's single-key reads and writes travel: grpc (clientv3) or gateway (its JSON gateway, /v3/kv/put and /v3/kv/range over HTTP/1.1)")
	profileDir := fs.String("profile-dir", "", "capture CPU profiles of the leader and a follower during the main runs "+
		"(keel needs -keel-bin pointing at keelprof; etcd gets --enable-pprof)")
	cfg := defaultSuiteConfig()
	fs.DurationVar(&cfg.writeDur, "write-dur", cfg.writeDur, "measured time per write/mixed run")
	fs.DurationVar(&cfg.readDur, "read-dur", cfg.readDur, "measured time per read run")
	fs.IntVar(&cfg.clients, "clients", cfg.clients, "concurrent clients of the many-clients shape")
	fs.IntVar(&cfg.scanKeys, "scan-keys", cfg.scanKeys, "keys loaded for the paged scan")
	fs.IntVar(&cfg.compactVersions, "compact-versions", cfg.compactVersions, "superseded versions removed by the compaction")
	fs.IntVar(&cfg.memKeys, "mem-keys", cfg.memKeys, "keys loaded before measuring RSS and the join")
	fs.DurationVar(&cfg.compactWindow, "compact-window", cfg.compactWindow, "minimum measured time during compaction")
	fs.StringVar(&cfg.only, "only", "", "run only these workloads (comma-separated: writes,reads,mixed,scans,compaction,watch,memory); default all")
	fs.IntVar(&cfg.watchers, "watchers", cfg.watchers, "watch fan-out: watchers of one prefix (1 writer)")
	fs.IntVar(&cfg.idleWatchers, "idle-watchers", cfg.idleWatchers, "watch memory: idle watchers on the leader (RSS growth reported per 10k)")
	fs.DurationVar(&cfg.watchDur, "watch-dur", cfg.watchDur, "watch fan-out: measured time")
	fs.IntVar(&cfg.watchInflight, "watch-inflight", cfg.watchInflight, "watch fan-out: the one writer's puts outstanding on its one connection in the third fan-out run, the target's (the first is back to back, the second has 16)")
	fs.Parse(args)
	if *work == "" || *out == "" {
		return errors.New("compare: -work and -out are required")
	}
	if *rounds < 1 {
		return fmt.Errorf("compare: -rounds %d, want >= 1", *rounds)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc := runConfig{cfg.clients, cfg.scanKeys, cfg.scanLimits, cfg.compactVersions, cfg.compactClients, cfg.memKeys, cfg.watchers, cfg.idleWatchers, cfg.watchInflight}
	for round := 1; round <= *rounds; round++ {
		for _, sys := range strings.Split(*systems, ",") {
			dir := func(sub string) string { return filepath.Join(*work, fmt.Sprintf("%s-r%d-%s", sys, round, sub)) }
			var newCl func(sub string) Cluster
			var version string
			switch sys {
			case "etcd":
				if *etcdProto != "grpc" && *etcdProto != "gateway" {
					return fmt.Errorf("-etcd-protocol %q: want grpc or gateway", *etcdProto)
				}
				version = firstLine(*etcdBin, "--version") + " (" + *etcdProto + ")"
				if *useTLS {
					version += " TLS"
				}
				newCl = func(sub string) Cluster {
					tlsWith := ""
					if *useTLS {
						tlsWith = *keelBin
					}
					c := newEtcdCluster(*etcdBin, dir(sub), *pidFile, *conns, *profileDir != "", tlsWith)
					c.gateway = *etcdProto == "gateway"
					return c
				}
			case "keel":
				if *keelProto != "stream" && *keelProto != "http" && *keelProto != "h2c" && *keelProto != "etcd" {
					return fmt.Errorf("-keel-protocol %q: want stream, http, h2c or etcd", *keelProto)
				}
				version = firstLine(*keelBin, "version") + " (" + *keelProto + ")"
				if *useTLS {
					version += " TLS"
				}
				newCl = func(sub string) Cluster {
					return newKeelCluster(*keelBin, dir(sub), *pidFile, *profileDir != "", *keelProto, *useTLS, *conns)
				}
			default:
				return fmt.Errorf("unknown system %q", sys)
			}
			res := &Results{System: sys, Version: version, Started: time.Now(), Stats: map[string]Stats{}, Metrics: map[string]float64{}}
			log.Printf("=== %s (%s), round %d of %d", sys, version, round, *rounds)
			s := &suite{cfg: cfg, newCl: newCl, res: res, profileDir: *profileDir}
			s.run(ctx)
			if err := saveResults(filepath.Join(*out, fmt.Sprintf("%s-%d.json", sys, round)), rc, res); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return printReport(*out)
}

type savedResults struct {
	Config  runConfig `json:"config"`
	Results *Results  `json:"results"`
}

func saveResults(path string, rc runConfig, r *Results) error {
	b, err := json.MarshalIndent(savedResults{rc, r}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func loadResults(path string) (*savedResults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s savedResults
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

func reportCmd(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	out := fs.String("out", "", "results dir of a compare run")
	fs.Parse(args)
	return printReport(*out)
}

// printReport renders the table from every run in out (<system>-<round>.json, or
// <system>.json from a single-run result dir), prints it with every run's notes and
// failures, and writes out/table.md.
func printReport(out string) error {
	res := map[string][]*Results{}
	var rc runConfig
	for _, sys := range []string{"keel", "etcd"} {
		paths, err := filepath.Glob(filepath.Join(out, sys+"-*.json"))
		if err != nil {
			return err
		}
		sort.Slice(paths, func(i, j int) bool { return roundOf(paths[i]) < roundOf(paths[j]) })
		if len(paths) == 0 {
			paths = []string{filepath.Join(out, sys+".json")}
		}
		for _, p := range paths {
			s, err := loadResults(p)
			if err != nil {
				log.Printf("report: %v", err)
				continue
			}
			res[sys], rc = append(res[sys], s.Results), s.Config
		}
	}
	if rc.Clients == 0 {
		return errors.New("report: no results")
	}
	table, _, _ := renderTable(rc.suite(), res["keel"], res["etcd"])
	var b strings.Builder
	fmt.Fprintf(&b, "keel: %s\netcd: %s\n\n%s", versionOf(res["keel"]), versionOf(res["etcd"]), table)
	for _, sys := range []string{"keel", "etcd"} {
		for i, r := range res[sys] {
			for _, n := range r.Notes {
				fmt.Fprintf(&b, "- %s run %d: %s\n", sys, i+1, n)
			}
			for _, f := range r.Failures {
				fmt.Fprintf(&b, "- %s run %d FAILED: %s\n", sys, i+1, f)
			}
		}
	}
	fmt.Print("\n" + b.String())
	return os.WriteFile(filepath.Join(out, "table.md"), []byte(b.String()), 0o644)
}

func firstLine(bin string, args ...string) string {
	outp, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(outp)), "\n")
	return line
}

// roundOf is the round number in a <system>-<round>.json path (0 when there is none).
func roundOf(path string) int {
	base := strings.TrimSuffix(filepath.Base(path), ".json")
	_, n, _ := strings.Cut(base, "-")
	r, _ := strconv.Atoi(n)
	return r
}

// versionOf is the version the first run of a system reports ("not run" without one).
func versionOf(runs []*Results) string {
	if len(runs) == 0 {
		return "not run"
	}
	return runs[0].Version
}
