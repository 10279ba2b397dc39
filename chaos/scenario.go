package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scenario is one named fault plan: a cluster size, the faults to repeat within a
// window of client traffic, and what the run proves.
type Scenario struct {
	Name   string
	Proves string
	Nodes  int
	Window time.Duration // faults are injected and healed within this window
	Faults []FaultSpec
	Disk   bool            // node n1's data dir is a small tmpfs (FaultDiskFull)
	Tune   func(*Workload) // adjusts the default workload
	// Backends names every backend the scenario must run on (BackendProcess,
	// BackendDocker): a declared run that cannot happen is a skip locally and a
	// failure under KEEL_CHAOS_STRICT=1.
	Backends []string
}

// Backend names, as Backend.Name returns them.
const (
	BackendProcess = "process"
	BackendDocker  = "docker"
)

// RunsOn says whether the scenario declares the backend.
func (sc Scenario) RunsOn(backend string) bool {
	for _, b := range sc.Backends {
		if b == backend {
			return true
		}
	}
	return false
}

// Backend starts the clusters scenarios run on.
type Backend interface {
	Name() string
	// Start starts a cluster for sc with its files under dir.
	Start(ctx context.Context, sc Scenario, dir string, logf func(string, ...any)) (Cluster, error)
	// Supports says whether every fault of sc can run on this backend.
	Supports(sc Scenario) error
}

// RunOptions are the per-run knobs.
type RunOptions struct {
	Seed          int64
	ArtifactsRoot string // artifacts go to <root>/<scenario>-<seed>
	KeepArtifacts bool   // write artifacts even when the run passes
	CheckTimeout  time.Duration
	Floors        Floors // zero: DefaultFloors
	Logf          func(format string, args ...any)
	// Test is the go test name that replays this run ("TestChaosDocker/pause"; ""
	// means TestChaos/<scenario>), for the replay command of the artifacts.
	Test string
}

// ReplayCommand is the command that runs test (a go test name, "TestChaos/pause") again
// with seed, and nothing else: every level of the name is anchored, as -run matches
// each level as an unanchored regexp ('TestChaos/pause' also runs TestChaosDocker/pause).
func ReplayCommand(test string, seed int64) string {
	parts := strings.Split(test, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return fmt.Sprintf("KEEL_CHAOS_SEED=%d go test -tags chaos ./chaos/ -run '%s' -v", seed, strings.Join(parts, "/"))
}

// RunResult is everything a run learned.
type RunResult struct {
	Scenario  string
	Backend   string
	Seed      int64
	Schedule  Schedule
	Events    []FaultEvent
	Injected  int
	Report    Report
	Counts    RunCounts   // what the floors were checked against
	Nodes     []NodeState // every node's keyspace after healing
	Problems  []string    // failures outside the history: crashes, divergence, floors not met, a workload error
	Elapsed   time.Duration
	OpsPerSec float64 // client operations attempted per second of traffic
	Artifacts string  // where the artifacts were written ("" when none)
	Replay    string  // the command that replays the run (ReplayCommand)
}

// OK says whether the run passed every check.
func (o *RunResult) OK() bool { return o.Report.OK() && len(o.Problems) == 0 }

// Summary is the one line a run prints.
func (o *RunResult) Summary() string {
	verdict := "PASS"
	if !o.OK() {
		verdict = "FAIL"
	}
	wc := o.Counts.Watch
	return fmt.Sprintf("CHAOS %s scenario=%s backend=%s seed=%d faults=%d/%d ops=%d acked_writes=%d lin_reads=%d min_ops_per_fault=%d checked=%d unknown=%d resolved=%d nodes_checked=%d watchers=%d min_watch_events=%d watch_resumes=%d watch_slow=%d watch_noleader=%d watch_compacted=%d%s ops/s=%.0f elapsed=%s",
		verdict, o.Scenario, o.Backend, o.Seed, o.Injected, len(o.Schedule.Steps), o.Report.Records, o.Counts.AckedWrites, o.Counts.LinearizableReads,
		o.Counts.MinOpsPerFault, o.Report.KeyOps, o.Report.Unknown, o.Report.Resolved, len(o.Nodes),
		wc.Watchers, wc.MinEvents, wc.Resumes, wc.Slow, wc.NoLeader, wc.Compacted, o.Counts.Lease, o.OpsPerSec, o.Elapsed.Round(time.Second))
}

// RunScenario starts a cluster, runs the workload while the schedule injects faults,
// heals everything, checks convergence, durability and linearizability, and writes the
// artifacts when something failed. The error is for harness failures (the cluster never
// started); a keel failure is in the RunResult.
func RunScenario(ctx context.Context, be Backend, sc Scenario, opt RunOptions) (*RunResult, error) {
	start := time.Now()
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	if opt.CheckTimeout == 0 {
		opt.CheckTimeout = 2 * time.Minute
	}
	if opt.Floors == (Floors{}) {
		opt.Floors = DefaultFloors()
	}
	if err := be.Supports(sc); err != nil {
		return nil, err
	}
	w := DefaultWorkload()
	if sc.Tune != nil {
		sc.Tune(&w)
	}
	w.Duration = sc.Window + 3*time.Second
	if err := w.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if opt.Test == "" {
		opt.Test = "TestChaos/" + sc.Name
	}
	out := &RunResult{Scenario: sc.Name, Backend: be.Name(), Seed: opt.Seed,
		Schedule: NewSchedule(opt.Seed, sc.Window, sc.Faults...), Replay: ReplayCommand(opt.Test, opt.Seed)}
	opt.Logf("scenario %s on %s, seed %d (replay: KEEL_CHAOS_SEED=%d); schedule %s",
		sc.Name, be.Name(), opt.Seed, opt.Seed, out.Schedule)

	dir, err := os.MkdirTemp("", "keel-chaos-"+sc.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	c, err := be.Start(sctx, sc, dir, opt.Logf)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start %d-node %s cluster: %w", sc.Nodes, be.Name(), err)
	}
	defer c.Close()

	h := NewHistory()
	watchers := StartWatchers(ctx, c, w.Prefix, w.Watchers, opt.Logf)
	leases := StartLeases(ctx, c, h, w.Duration, opt.Logf)
	runner := NewFaultRunner(c, h, opt.Logf)
	atk, err := startAttack(ctx, c, h, leases, w.Prefix, opt.Logf)
	if err != nil {
		out.Problems = append(out.Problems, err.Error())
	}
	trafficStart := time.Now()
	var wg sync.WaitGroup
	var werr error
	wg.Add(2)
	go func() { defer wg.Done(); werr = w.Run(ctx, c, h, opt.Seed) }()
	go func() { defer wg.Done(); runner.Run(ctx, out.Schedule) }()
	wg.Wait()
	if atk != nil {
		atk.stop()
	}
	out.OpsPerSec = float64(len(h.Records())) / time.Since(trafficStart).Seconds()
	out.Events, out.Injected = runner.Events(), runner.Injected()
	if werr != nil {
		out.Problems = append(out.Problems, "workload: "+werr.Error())
	}

	var tl *Timeline
	var problems, checked []string
	problems, tl, out.Nodes = afterFaults(ctx, c, h, w, opt.Logf, hasLinkFaults(sc.Faults))
	out.Problems = append(out.Problems, problems...)
	out.Problems = append(out.Problems, runner.FailFastProblems()...)
	if atk != nil {
		out.Problems = append(out.Problems, atk.check(ctx)...)
	}
	watches := watchers.Stop(tl.Last(), 30*time.Second)
	if seen := lastWatched(watches); tl != nil && seen > tl.Last() {
		// A write can commit after the history was read: a request a partition held
		// (its TCP segments retransmitted once the link healed) reaches its node late,
		// long after the client gave up on it (an unknown outcome). The watchers saw it,
		// so read the history again, up to the revision now current.
		if _, later, err := timelineOf(ctx, c); err != nil {
			out.Problems = append(out.Problems, "read back the MVCC history again: "+err.Error())
		} else {
			opt.Logf("watchers saw revision %d after the history was read up to %d: read again up to %d", seen, tl.Last(), later.Last())
			tl = later
		}
	}
	out.Report, out.Counts, checked = CheckRun(RunData{
		Records: h.Records(), Keys: append(append([]string(nil), w.Keys...), finalKey), Prefix: w.Prefix,
		Timeline: tl, Nodes: out.Nodes, Specs: sc.Faults, Schedule: out.Schedule, Events: out.Events,
		Watches: watches, Leases: leases.Stop(),
	}, opt.Floors, opt.CheckTimeout)
	out.Problems = append(out.Problems, checked...)
	out.Elapsed = time.Since(start)
	if !out.OK() || opt.KeepArtifacts {
		out.Artifacts = filepath.Join(opt.ArtifactsRoot, fmt.Sprintf("%s-%s-%d", sc.Name, be.Name(), opt.Seed))
		if err := writeArtifacts(out, c, h); err != nil {
			opt.Logf("write artifacts: %v", err)
		}
	}
	return out, nil
}

const finalKey = "chaos-final"

// afterFaults heals the cluster and checks what must hold once it is whole: no node
// crashed, all are ready, they converge to one state within 10s, a new write succeeds,
// and every key can be read (the reads join the history for the durability check).
// It returns the problems, the store's MVCC history read back from one node, and every
// node's keyspace once it applied the leader's commit index (for CheckNodes).
func afterFaults(ctx context.Context, c Cluster, h *History, w Workload, logf func(string, ...any), linkFaults bool) ([]string, *Timeline, []NodeState) {
	var problems []string
	for _, id := range c.Crashed() {
		problems = append(problems, fmt.Sprintf("node %s exited without being stopped (see its log)", id))
	}
	if err := c.HealAll(ctx); err != nil {
		problems = append(problems, "heal: "+err.Error())
	}
	healed := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := WaitAllReady(rctx, c)
	cancel()
	if err != nil {
		return append(problems, "after healing: "+err.Error()), nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rev, err := Converge(cctx, c)
	cancel()
	if err != nil {
		problems = append(problems, "after healing: "+err.Error())
	} else {
		logf("healed: %d nodes ready and converged at revision %d in %s", len(c.Members()), rev, time.Since(healed).Round(time.Millisecond))
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := FinalWrite(fctx, c, h, finalKey, fmt.Sprintf("final-%d", time.Now().UnixNano())); err != nil {
		problems = append(problems, err.Error())
	}
	if err := FinalReads(fctx, c, h, w.Keys); err != nil {
		problems = append(problems, err.Error())
	}
	problems = append(problems, checkACLEnforced(fctx, c)...)
	for _, id := range c.Crashed() {
		if !strings.Contains(strings.Join(problems, "\n"), "node "+id+" ") {
			problems = append(problems, fmt.Sprintf("node %s exited without being stopped after healing (see its log)", id))
		}
	}
	// A connection the proxy could not attribute escapes link faults; that matters only
	// when the run injects them (a node starting or stopping can leave one otherwise).
	if u, ok := c.(interface{ Unidentified() []string }); ok && linkFaults && len(u.Unidentified()) > 0 {
		from := u.Unidentified()
		problems = append(problems, fmt.Sprintf("%d proxied raft connections came from an unidentified source (not a node's IP, and no running node's socket; source -> proxy: %s): link faults did not apply to them",
			len(from), strings.Join(from[:min(len(from), 8)], ", ")))
	}
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	states, err := ReadNodeStates(nctx, c)
	cancel()
	if err != nil {
		problems = append(problems, "read every node's state: "+err.Error())
	} else if len(states) != len(c.Members()) {
		problems = append(problems, fmt.Sprintf("read the state of %d nodes, want %d", len(states), len(c.Members())))
	}
	for _, s := range states {
		logf("node %s: applied %d, %d keys at revision %d, hash %s", s.Node, s.Applied, len(s.KVs), s.Revision, s.Hash())
	}
	start := time.Now()
	leader, tl, err := timelineOf(ctx, c)
	if err != nil {
		problems = append(problems, "read back the MVCC history: "+err.Error())
		return problems, tl, states
	}
	logf("read back the MVCC history (revisions %d..%d) from %s in %s", tl.From, tl.To, leader, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	problems = append(problems, compareTimelines(ctx, c, leader, tl)...)
	logf("every node's MVCC history compared with %s's in %s", leader, time.Since(start).Round(time.Millisecond))
	return problems, tl, states
}

// timelineOf reads the MVCC history, up to the current revision, from the leader.
func timelineOf(ctx context.Context, c Cluster) (string, *Timeline, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	leader, err := WaitLeader(ctx, c)
	if err != nil {
		return "", nil, err
	}
	st, err := c.Client(leader).Status(ctx)
	if err != nil {
		return "", nil, err
	}
	tl, err := ReadTimeline(ctx, c.Client(leader), st.Revision)
	return leader, tl, err
}

// writeArtifacts saves what is needed to understand a run: the porcupine
// visualization, the history, the schedule and fault events, the report, node logs.
func writeArtifacts(o *RunResult, c Cluster, h *History) error {
	if err := os.MkdirAll(o.Artifacts, 0o755); err != nil {
		return err
	}
	var errs []error
	errs = append(errs, o.Report.WriteVisualization(filepath.Join(o.Artifacts, "linearizability.html")))
	errs = append(errs, h.WriteJSON(filepath.Join(o.Artifacts, "history.jsonl")))
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nreplay: %s\n\n", o.Summary(), o.Replay)
	fmt.Fprintf(&b, "report: %s\n\nschedule: %s\n\nfaults (history clock, ms):\n", o.Report, o.Schedule)
	for _, e := range o.Events {
		fmt.Fprintf(&b, "  %8.0f - %8.0f  %s %s %s\n", float64(e.Start)/1e6, float64(e.End)/1e6, e.Desc, e.Err, e.HealErr)
	}
	b.WriteString("\nviolations:\n")
	for _, v := range o.Report.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	b.WriteString("\nproblems:\n")
	for _, p := range o.Problems {
		fmt.Fprintf(&b, "  - %s\n", p)
	}
	errs = append(errs, os.WriteFile(filepath.Join(o.Artifacts, "report.txt"), []byte(b.String()), 0o644))
	errs = append(errs, c.CollectLogs(o.Artifacts))
	return errors.Join(errs...)
}

// ArtifactsRoot is KEEL_CHAOS_ARTIFACTS, or artifacts/chaos at the module root (found
// by walking up from the working directory to go.mod).
func ArtifactsRoot() string {
	if d := os.Getenv("KEEL_CHAOS_ARTIFACTS"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return filepath.Join("artifacts", "chaos")
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "artifacts", "chaos")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(wd, "artifacts", "chaos")
		}
	}
}

// hasLinkFaults says whether any spec breaks links between nodes (the proxy's job).
func hasLinkFaults(specs []FaultSpec) bool {
	for _, f := range specs {
		switch f.Kind {
		case FaultIsolate, FaultSplit, FaultOneWay, FaultBridge, FaultDelay, FaultDrop:
			return true
		}
	}
	return false
}
