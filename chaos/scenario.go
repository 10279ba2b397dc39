package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	Logf          func(format string, args ...any)
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
	Problems  []string // failures outside the history: crashes, divergence, lost final write
	Elapsed   time.Duration
	OpsPerSec float64 // client operations attempted per second of traffic
	Artifacts string  // where the artifacts were written ("" when none)
}

// OK says whether the run passed every check.
func (o *RunResult) OK() bool { return o.Report.OK() && len(o.Problems) == 0 }

// Summary is the one line a run prints.
func (o *RunResult) Summary() string {
	verdict := "PASS"
	if !o.OK() {
		verdict = "FAIL"
	}
	return fmt.Sprintf("CHAOS %s scenario=%s backend=%s seed=%d faults=%d ops=%d checked=%d unknown=%d resolved=%d ops/s=%.0f elapsed=%s",
		verdict, o.Scenario, o.Backend, o.Seed, o.Injected, o.Report.Records, o.Report.KeyOps, o.Report.Unknown, o.Report.Resolved,
		o.OpsPerSec, o.Elapsed.Round(time.Second))
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
	if err := be.Supports(sc); err != nil {
		return nil, err
	}
	w := DefaultWorkload()
	if sc.Tune != nil {
		sc.Tune(&w)
	}
	w.Duration = sc.Window + 3*time.Second
	out := &RunResult{Scenario: sc.Name, Backend: be.Name(), Seed: opt.Seed,
		Schedule: NewSchedule(opt.Seed, sc.Window, sc.Faults...)}
	opt.Logf("scenario %s on %s, seed %d (replay: KEEL_CHAOS_SEED=%d); schedule %s",
		sc.Name, be.Name(), opt.Seed, opt.Seed, out.Schedule)

	dir, err := os.MkdirTemp("", "keel-chaos-"+sc.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	c, err := be.Start(sctx, sc, dir, opt.Logf)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start %d-node %s cluster: %w", sc.Nodes, be.Name(), err)
	}
	defer c.Close()

	h := NewHistory()
	runner := NewFaultRunner(c, h, opt.Logf)
	trafficStart := time.Now()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.Run(ctx, c, h, opt.Seed) }()
	go func() { defer wg.Done(); runner.Run(ctx, out.Schedule) }()
	wg.Wait()
	out.OpsPerSec = float64(len(h.Records())) / time.Since(trafficStart).Seconds()
	out.Events, out.Injected = runner.Events(), runner.Injected()

	var tl *Timeline
	out.Problems, tl = afterFaults(ctx, c, h, w, opt.Logf)
	out.Report = Check(h.Records(), append(append([]string(nil), w.Keys...), finalKey), w.Prefix, tl, opt.CheckTimeout)
	out.Report.Annotate(out.Events)
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
// It returns the problems and the store's MVCC history read back from one node.
func afterFaults(ctx context.Context, c Cluster, h *History, w Workload, logf func(string, ...any)) ([]string, *Timeline) {
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
		return append(problems, "after healing: "+err.Error()), nil
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
	for _, id := range c.Crashed() {
		if !strings.Contains(strings.Join(problems, "\n"), "node "+id+" ") {
			problems = append(problems, fmt.Sprintf("node %s exited without being stopped after healing (see its log)", id))
		}
	}
	if u, ok := c.(interface{ Unidentified() int }); ok && u.Unidentified() > 0 {
		problems = append(problems, fmt.Sprintf("%d proxied raft connections came from an unidentified source: link faults did not apply to them", u.Unidentified()))
	}
	tl, err := timelineOf(ctx, c)
	if err != nil {
		problems = append(problems, "read back the MVCC history: "+err.Error())
	}
	return problems, tl
}

// timelineOf reads the MVCC history, up to the current revision, from the leader.
func timelineOf(ctx context.Context, c Cluster) (*Timeline, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	leader, err := WaitLeader(ctx, c)
	if err != nil {
		return nil, err
	}
	st, err := c.Client(leader).Status(ctx)
	if err != nil {
		return nil, err
	}
	return ReadTimeline(ctx, c.Client(leader), st.Revision)
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
	fmt.Fprintf(&b, "%s\n\nreplay: KEEL_CHAOS_SEED=%d go test -tags chaos ./chaos/ -run 'TestChaos/%s' -v\n\n", o.Summary(), o.Seed, o.Scenario)
	fmt.Fprintf(&b, "report: %s\n\nschedule: %s\n\nfaults (history clock, ms):\n", o.Report, o.Schedule)
	for _, e := range o.Events {
		fmt.Fprintf(&b, "  %8.0f - %8.0f  %s %s\n", float64(e.Start)/1e6, float64(e.End)/1e6, e.Desc, e.Err)
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
