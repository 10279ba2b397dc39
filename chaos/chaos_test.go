//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// totals sums every run of this test binary for the closing summary lines. expected
// counts the declared runs this binary was asked for (every scenario × backend subtest
// that -run selected), runs those that ran to a verdict, skipped those that could not.
var totals struct {
	sync.Mutex
	expected, runs, failed, ops, keyOps, unknown, faults, steps int
	skipped                                                     []string
	failures                                                    []string // why each failed run failed, repeated at the end
	elapsed                                                     time.Duration
}

// strict is KEEL_CHAOS_STRICT=1 (CI): a declared run that cannot happen fails instead
// of skipping, and the binary fails unless every expected run was done.
var strict = os.Getenv("KEEL_CHAOS_STRICT") == "1"

func TestMain(m *testing.M) {
	start := time.Now()
	if swept := SweepMounts(); len(swept) > 0 {
		fmt.Printf("unmounted tmpfs left by an earlier run: %v\n", swept)
	}
	code := m.Run()
	totals.Lock()
	fmt.Printf("CHAOS TOTAL runs=%d failed=%d ops=%d checked_key_ops=%d unknown=%d faults=%d/%d scenario_time=%s wall=%s\n",
		totals.runs, totals.failed, totals.ops, totals.keyOps, totals.unknown, totals.faults, totals.steps,
		totals.elapsed.Round(time.Second), time.Since(start).Round(time.Second))
	fmt.Printf("chaos: runs done=%d expected=%d strict=%t\n", totals.runs, totals.expected, strict)
	for _, s := range totals.skipped {
		fmt.Printf("chaos: SKIPPED %s\n", s)
	}
	// CI keeps only the tail of a long log: repeat why each failed run failed here.
	for _, f := range totals.failures {
		fmt.Printf("chaos: FAILED %s\n", f)
	}
	if totals.runs != totals.expected {
		fmt.Printf("chaos: %d of %d expected runs did not run to a verdict\n", totals.expected-totals.runs, totals.expected)
		if strict && code == 0 {
			code = 1
		}
	}
	totals.Unlock()
	os.Exit(code)
}

// expectRun counts one declared run; cannotRun skips it (loudly) or, under
// KEEL_CHAOS_STRICT=1, fails it.
func expectRun() {
	totals.Lock()
	totals.expected++
	totals.Unlock()
}

func cannotRun(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if strict {
		t.Fatalf("KEEL_CHAOS_STRICT=1: declared run cannot happen: %s", msg)
	}
	totals.Lock()
	totals.skipped = append(totals.skipped, t.Name()+": "+msg)
	totals.Unlock()
	t.Skipf("SKIP (a failure under KEEL_CHAOS_STRICT=1): %s", msg)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// keelBin is KEEL_BIN, or a static keel built once into a temp dir.
func keelBin(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("KEEL_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("KEEL_BIN=%s: %v (run `make build`)", b, err)
		}
		return b
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "keel-chaos-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "keel")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/keel")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/keel: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// seed is KEEL_CHAOS_SEED (replays a run's fault schedule) or a fresh one.
func seed(t *testing.T) int64 {
	t.Helper()
	if s := os.Getenv("KEEL_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_CHAOS_SEED=%q: %v", s, err)
		}
		return v
	}
	return time.Now().UnixNano() % 1_000_000_000
}

// runScenario runs sc once and fails t with everything that broke.
func runScenario(t *testing.T, be Backend, sc Scenario, seed int64) {
	t.Helper()
	if err := be.Supports(sc); err != nil {
		cannotRun(t, "%v", err)
	}
	t.Logf("seed %d (replay: KEEL_CHAOS_SEED=%d); proves: %s", seed, seed, sc.Proves)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := RunScenario(ctx, be, sc, RunOptions{
		Seed: seed, ArtifactsRoot: ArtifactsRoot(), Logf: t.Logf,
		KeepArtifacts: os.Getenv("KEEL_CHAOS_KEEP") != "", Test: t.Name(),
	})
	if err != nil {
		t.Fatalf("scenario %s: %v", sc.Name, err)
	}
	totals.Lock()
	totals.runs++
	totals.ops += res.Report.Records
	totals.keyOps += res.Report.KeyOps
	totals.unknown += res.Report.Unknown
	totals.faults += res.Injected
	totals.steps += len(res.Schedule.Steps)
	totals.elapsed += res.Elapsed
	if !res.OK() {
		totals.failed++
		why := append(append([]string(nil), res.Report.Violations...), res.Problems...)
		if len(why) > 5 {
			why = append(why[:5], fmt.Sprintf("... and %d more", len(why)-5))
		}
		totals.failures = append(totals.failures, fmt.Sprintf("%s (seed %d): %s", t.Name(), seed, strings.Join(why, "; ")))
	}
	totals.Unlock()
	t.Log(res.Summary())
	if res.OK() {
		return
	}
	for i, v := range res.Report.Violations {
		if i == 20 {
			t.Errorf("... and %d more violations", len(res.Report.Violations)-20)
			break
		}
		t.Errorf("violation: %s", v)
	}
	for _, p := range res.Problems {
		t.Errorf("problem: %s", p)
	}
	t.Errorf("artifacts: %s (replay: %s)", res.Artifacts, res.Replay)
}

// TestChaos runs every scenario declared for processes on keel processes on loopback.
// ACLs are on: the nodes run with their default (deny until bootstrapped), the harness
// bootstraps, and every client of the workload, checkers and faults sends the token.
func TestChaos(t *testing.T) {
	be := &ProcBackend{Bin: keelBin(t), Remover: DetectRemover(keelBin(t)), ACL: true}
	for _, sc := range Scenarios() {
		if !sc.RunsOn(BackendProcess) {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			expectRun()
			runScenario(t, be, sc, seed(t))
		})
	}
}

// TestChaosTLS runs the combined-nemesis scenario on a cluster with TLS on every port
// (mutual TLS on Raft through the fault proxies, HTTPS and the stream protocol with
// client certificates) and ACLs enforced (every harness client sends the bootstrapped
// token over TLS): faults must not cost more than they do in plain text. The nodes
// serve the etcd door too (TLS, client certificates), for the attacker's etcd attacks
// (attack_etcd.go).
func TestChaosTLS(t *testing.T) {
	be := &ProcBackend{Bin: keelBin(t), TLS: true, ACL: true, Etcd: true}
	for _, sc := range Scenarios() {
		if sc.Name != "mixed" {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			expectRun()
			runScenario(t, be, sc, seed(t))
		})
	}
}

// TestSoak repeats random scenarios with random seeds for KEEL_SOAK_DURATION (skipped
// when unset); each run prints its seed.
func TestSoak(t *testing.T) {
	d := os.Getenv("KEEL_SOAK_DURATION")
	if d == "" {
		t.Skip("KEEL_SOAK_DURATION not set (make chaos-soak DURATION=30m)")
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("KEEL_SOAK_DURATION=%q: %v", d, err)
	}
	be := &ProcBackend{Bin: keelBin(t), Remover: DetectRemover(keelBin(t))}
	rng := rand.New(rand.NewSource(seed(t)))
	all := Scenarios()
	for i, end := 0, time.Now().Add(dur); time.Now().Before(end); i++ {
		sc := all[rng.Intn(len(all))]
		s := rng.Int63n(1_000_000_000)
		ok := t.Run(fmt.Sprintf("%03d-%s", i, sc.Name), func(t *testing.T) {
			expectRun()
			runScenario(t, be, sc, s)
		})
		if !ok {
			t.Logf("soak run %d (%s, seed %d) failed; replay: %s", i, sc.Name, s, ReplayCommand("TestChaos/"+sc.Name, s))
		}
	}
}

// TestChaosDocker runs the scenarios declared for containers. Without a Docker daemon
// or a static binary every one of them is a declared run that cannot happen.
func TestChaosDocker(t *testing.T) {
	unavailable := DockerAvailable(context.Background())
	bin := keelBin(t)
	if unavailable == nil {
		unavailable = IsStatic(bin)
	}
	be := &DockerBackend{Bin: bin, ACL: true}
	if unavailable == nil {
		if swept := SweepDocker(context.Background()); len(swept) > 0 {
			t.Logf("removed docker resources left by an earlier run: %v", swept)
		}
		t.Cleanup(be.Close)
	}
	for _, sc := range Scenarios() {
		if !sc.RunsOn(BackendDocker) {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			expectRun()
			if unavailable != nil {
				cannotRun(t, "containers: %v", unavailable)
			}
			runScenario(t, be, sc, seed(t))
		})
	}
}
