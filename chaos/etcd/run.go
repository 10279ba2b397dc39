package etcdchaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/keel-kv/keel/chaos"
)

// Scenario is one run's fault plan on a 3-node keel: chaos's fault specs, laid out
// from the seed within Window (chaos.NewSchedule).
type Scenario struct {
	Name   string
	Window time.Duration
	Faults []chaos.FaultSpec
}

// Scenarios are the runs `make chaos-etcd` makes: leader kills, and partitions (the
// leader cut off, a minority cut off).
func Scenarios() []Scenario {
	s := time.Second
	return []Scenario{
		{Name: "kill-leader", Window: 50 * s, Faults: []chaos.FaultSpec{
			{Kind: chaos.FaultKill, Target: chaos.TargetLeader, HoldMin: 1 * s, HoldMax: 4 * s, GapMin: 2 * s, GapMax: 4 * s},
		}},
		{Name: "partition", Window: 50 * s, Faults: []chaos.FaultSpec{
			{Kind: chaos.FaultIsolate, Target: chaos.TargetLeader, HoldMin: 3 * s, HoldMax: 6 * s, GapMin: 2 * s, GapMax: 3 * s},
			{Kind: chaos.FaultSplit, HoldMin: 3 * s, HoldMax: 6 * s, GapMin: 2 * s, GapMax: 3 * s},
		}},
	}
}

// DefaultFloors are chaos's (chaos.DefaultFloors: 200 acknowledged writes, 200
// linearizable reads, 6 operations over each fault) without watchers.
func DefaultFloors() chaos.Floors {
	f := chaos.DefaultFloors()
	f.Watchers, f.WatchEvents = 0, 0
	return f
}

// Options are one run's knobs.
type Options struct {
	Bin       string // the keel binary
	Seed      int64
	Subnet    int          // the nodes' loopback IPs are 127.<Subnet>.0.x
	Artifacts string       // where a failed run writes its history, report and logs ("" none)
	Keep      bool         // write the artifacts of a passing run too
	Floors    chaos.Floors // zero: DefaultFloors
	Logf      func(format string, args ...any)
	// Intercept sits in front of every unary call of the workload's etcd clients: a
	// door broken on purpose (the checker's self-test). nil for real runs.
	Intercept grpc.UnaryClientInterceptor
}

// Result is what a run learned.
type Result struct {
	Scenario string
	Seed     int64
	Schedule chaos.Schedule
	Events   []chaos.FaultEvent
	Injected int
	Report   chaos.Report
	Counts   chaos.RunCounts
	Problems []string // failures outside the history: crashes, no convergence, floors, fail-fast, node states
	Nodes    []chaos.NodeState
	Elapsed  time.Duration
	Records  []chaos.Record
}

// OK says whether the run passed every check.
func (r *Result) OK() bool { return r.Report.OK() && len(r.Problems) == 0 }

// Summary is the one line a run prints.
func (r *Result) Summary() string {
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	unknown := 0
	for _, rec := range r.Records {
		if rec.Outcome == chaos.OutcomeUnknown {
			unknown++
		}
	}
	return fmt.Sprintf("CHAOS-ETCD %s scenario=%s seed=%d faults=%d/%d ops=%d acked_writes=%d lin_reads=%d min_ops_per_fault=%d checked_key_ops=%d unknown_writes=%d (from the MVCC history: %d applied, %d never, %d still unknown) failed=%d linearizable=%s elapsed=%s",
		verdict, r.Scenario, r.Seed, r.Injected, len(r.Schedule.Steps), r.Report.Records, r.Counts.AckedWrites, r.Counts.LinearizableReads,
		r.Counts.MinOpsPerFault, r.Report.KeyOps, unknown, r.Report.Resolved, unknown-r.Report.Resolved-r.Report.Unknown, r.Report.Unknown, r.Report.Failed, r.Report.Linearizable, r.Elapsed.Round(time.Second))
}

// finalKey is the key of the write made after healing (it must be acknowledged).
const finalKey = "chaos-final"

// Run starts a 3-node keel with the etcd door on, drives the workload through etcd's
// client while the schedule injects sc's faults, heals, reads every key and the MVCC
// history back through the door, and checks the history. The error is for harness
// failures (the cluster never started); keel's failures are in the Result.
func Run(ctx context.Context, sc Scenario, opt Options) (*Result, error) {
	start := time.Now()
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	if opt.Floors == (chaos.Floors{}) {
		opt.Floors = DefaultFloors()
	}
	w := DefaultWorkload()
	w.Duration = sc.Window + 3*time.Second
	out := &Result{Scenario: sc.Name, Seed: opt.Seed, Schedule: chaos.NewSchedule(opt.Seed, sc.Window, sc.Faults...)}
	opt.Logf("etcd scenario %s, seed %d; schedule %s", sc.Name, opt.Seed, out.Schedule)
	dir, err := os.MkdirTemp("", "keel-chaos-etcd-"+sc.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := chaos.DefaultProcConfig()
	cfg.Bin, cfg.Dir, cfg.Subnet, cfg.Logf = opt.Bin, dir, opt.Subnet, opt.Logf
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	c, err := startCluster(sctx, cfg, opt.Intercept)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start 3-node keel: %w", err)
	}
	defer c.Close()

	h := chaos.NewHistory()
	runner := traffic(ctx, c, h, w, out, opt)
	var tl *chaos.Timeline
	var problems []string
	tl, out.Nodes, problems = afterFaults(ctx, c, h, w, opt.Logf)
	out.Problems = append(out.Problems, problems...)
	// The fault runner probes cut-off nodes over HTTP (chaos.FailFastLimit): a
	// problem there is keel's, whichever door the workload uses.
	out.Problems = append(out.Problems, runner.FailFastProblems()...)
	out.Records = h.Records()
	out.Report, out.Counts, problems = Judge(RunData{Records: out.Records, Timeline: tl, Nodes: out.Nodes,
		Specs: sc.Faults, Schedule: out.Schedule, Events: out.Events}, w, opt.Floors)
	out.Problems = append(out.Problems, problems...)
	out.Elapsed = time.Since(start)
	if (!out.OK() || opt.Keep) && opt.Artifacts != "" {
		if err := writeArtifacts(out, c, h, filepath.Join(opt.Artifacts, fmt.Sprintf("%s-%d", sc.Name, opt.Seed))); err != nil {
			opt.Logf("write artifacts: %v", err)
		}
	}
	return out, nil
}

// traffic runs the workload while the fault runner injects out.Schedule, and records
// what the faults did in out.
func traffic(ctx context.Context, c *cluster, h *chaos.History, w Workload, out *Result, opt Options) *chaos.FaultRunner {
	runner := chaos.NewFaultRunner(c, h, opt.Logf)
	var wg sync.WaitGroup
	var werr error
	wg.Add(2)
	go func() { defer wg.Done(); werr = w.Run(ctx, c, h, opt.Seed) }()
	go func() { defer wg.Done(); runner.Run(ctx, out.Schedule) }()
	wg.Wait()
	out.Events, out.Injected = runner.Events(), runner.Injected()
	if werr != nil {
		out.Problems = append(out.Problems, "workload: "+werr.Error())
	}
	return runner
}

// RunData is what a finished run recorded that Judge reads.
type RunData struct {
	Records  []chaos.Record
	Timeline *chaos.Timeline   // the MVCC history read back through the door
	Nodes    []chaos.NodeState // every node's keyspace read through its own door
	Specs    []chaos.FaultSpec
	Schedule chaos.Schedule
	Events   []chaos.FaultEvent
}

// Judge checks a finished run with chaos's checker: the floors (enough acknowledged
// writes and linearizable reads, every fault injected and overlapped by enough
// operations), chaos.Check (unknown outcomes settled from the MVCC history, every
// acknowledged write in it, no phantom values, porcupine against chaos.KVModel,
// serializable reads, scan pages, durability of the final reads) and chaos.CheckNodes
// (every node holds every acknowledged write, no value nobody wrote, all nodes alike).
func Judge(d RunData, w Workload, floors chaos.Floors) (chaos.Report, chaos.RunCounts, []string) {
	counts, problems := chaos.CheckFloors(d.Records, d.Specs, d.Schedule, d.Events, floors)
	if d.Timeline == nil {
		problems = append(problems, "no MVCC history: unknown outcomes could not be settled, acknowledged writes not looked up")
	}
	keys := append(append([]string(nil), w.Keys...), finalKey)
	rep := chaos.Check(d.Records, keys, w.Prefix, d.Timeline, 2*time.Minute)
	rep.Annotate(d.Events)
	if len(d.Nodes) == 0 {
		problems = append(problems, "no node's final state was read: nothing checked node by node")
	}
	resolved, _ := chaos.Resolve(d.Records, d.Timeline, w.Prefix)
	problems = append(problems, chaos.CheckNodes(resolved, d.Timeline, d.Nodes, w.Prefix)...)
	return rep, counts, problems
}

// afterFaults heals the cluster and reads what the check needs through the door: no
// node crashed, all are ready and converge within 10 s, a final write is acknowledged,
// every key is read linearizably (the reads join the history for the durability
// check), the MVCC history is read back from the leader's etcd door, and every node's
// keyspace from its own.
func afterFaults(ctx context.Context, c *cluster, h *chaos.History, w Workload, logf func(string, ...any)) (*chaos.Timeline, []chaos.NodeState, []string) {
	tl, problems := healAndRead(ctx, c, h, w, logf)
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	states, err := ReadNodeStates(nctx, c)
	if err != nil {
		problems = append(problems, "read every node's state through its etcd door: "+err.Error())
	}
	for _, st := range states {
		logf("node %s: %d keys at revision %d, hash %s", st.Node, len(st.KVs), st.Revision, st.Hash())
	}
	return tl, states, problems
}

// healAndRead is afterFaults up to the MVCC history.
func healAndRead(ctx context.Context, c *cluster, h *chaos.History, w Workload, logf func(string, ...any)) (*chaos.Timeline, []string) {
	var problems []string
	for _, id := range c.Crashed() {
		problems = append(problems, fmt.Sprintf("node %s exited without being stopped (see its log)", id))
	}
	if err := c.HealAll(ctx); err != nil {
		problems = append(problems, "heal: "+err.Error())
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := chaos.WaitAllReady(rctx, c)
	cancel()
	if err != nil {
		return nil, append(problems, "after healing: "+err.Error())
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rev, err := chaos.Converge(cctx, c)
	cancel()
	if err != nil {
		problems = append(problems, "after healing: "+err.Error())
	} else {
		logf("healed: %d nodes ready and converged at revision %d", len(c.Members()), rev)
	}
	leader, err := chaos.WaitLeader(ctx, c)
	if err != nil {
		return nil, append(problems, "after healing: "+err.Error())
	}
	cl := c.Etcd(leader)
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	problems = append(problems, finalOps(fctx, cl, leader, h, w.Keys)...)
	st, err := cl.Get(fctx, finalKey)
	if err != nil {
		return nil, append(problems, "current revision: "+err.Error())
	}
	tl, err := ReadTimeline(fctx, cl, st.Header.Revision)
	if err != nil {
		return nil, append(problems, "read back the MVCC history through the etcd door: "+err.Error())
	}
	logf("read back the MVCC history (revisions %d..%d) through %s's etcd door", tl.From, tl.To, leader)
	return tl, problems
}

// finalOps writes finalKey and reads every key through cl, recording each as an
// operation of chaos.FinalClient.
func finalOps(ctx context.Context, cl *clientv3.Client, node string, h *chaos.History, keys []string) []string {
	var problems []string
	ops := []chaos.Record{{Kind: chaos.OpPut, Key: finalKey, Value: fmt.Sprintf("final-%d", time.Now().UnixNano())}}
	for _, k := range keys {
		ops = append(ops, chaos.Record{Kind: chaos.OpGet, Key: k})
	}
	for _, r := range ops {
		r.Client, r.Node = chaos.FinalClient, node
		oc, cancel := context.WithTimeout(ctx, 5*time.Second)
		r.Call = h.Now()
		err := Do(oc, cl, &r)
		r.Return = h.Now()
		cancel()
		r.Outcome = Classify(err, r.IsWrite())
		if err != nil {
			r.Err = err.Error()
			problems = append(problems, fmt.Sprintf("after healing: %s of %s through the etcd door: %v", r.Kind, r.Key, err))
		}
		h.Add(r)
	}
	return problems
}

// writeArtifacts saves a failed run: porcupine's visualization, the history, the
// report with the schedule and fault events, every node's log.
func writeArtifacts(o *Result, c *cluster, h *chaos.History, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	errs = append(errs, o.Report.WriteVisualization(filepath.Join(dir, "linearizability.html")))
	errs = append(errs, h.WriteJSON(filepath.Join(dir, "history.jsonl")))
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nreport: %s\n\nschedule: %s\n\nfaults (history clock, ms):\n", o.Summary(), o.Report, o.Schedule)
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
	errs = append(errs, os.WriteFile(filepath.Join(dir, "report.txt"), []byte(b.String()), 0o644))
	errs = append(errs, c.CollectLogs(dir))
	return errors.Join(errs...)
}
