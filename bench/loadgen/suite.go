package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// suiteConfig sizes the workloads. The defaults follow etcd's published benchmark shapes
// (8-byte keys, 256-byte values) scaled to a 2-core machine and a ~15-minute budget for
// both systems together.
type suiteConfig struct {
	warm, writeDur, readDur time.Duration
	clients                 int // the "many clients" shape
	valBytes                int
	batch                   int // puts per load transaction
	loadClients             int

	scanKeys, scanValBytes int
	scanLimits             []int
	scanBudget             time.Duration // per page size
	scanMaxRuns            int
	only                   string // -only: comma-separated workloads; "" = all

	compactKeys, compactVersions int // superseded versions = compactVersions
	compactClients               int
	compactWindow                time.Duration

	memKeys   int
	joinLimit time.Duration

	watchers, idleWatchers int // the watch workload: fan-out watchers, idle watchers
	watchDur               time.Duration
	watchInflight          int // the fan-out writer's puts outstanding
}

func defaultSuiteConfig() suiteConfig {
	return suiteConfig{
		warm: time.Second, writeDur: 8 * time.Second, readDur: 6 * time.Second,
		clients: 64, valBytes: 256, batch: 100, loadClients: 16,
		scanKeys: 100_000, scanValBytes: 512, scanLimits: []int{500, 5000},
		scanBudget: 10 * time.Second, scanMaxRuns: 20,
		compactKeys: 10_000, compactVersions: 1_000_000, compactClients: 16,
		compactWindow: 10 * time.Second,
		memKeys:       1_000_000, joinLimit: 5 * time.Minute,
		watchers: 1000, idleWatchers: 10_000, watchDur: 8 * time.Second, watchInflight: 64,
	}
}

// Results is everything measured for one system in one run (saved as JSON).
type Results struct {
	System   string             `json:"system"`
	Version  string             `json:"version"`
	Started  time.Time          `json:"started"`
	Stats    map[string]Stats   `json:"stats"`
	Metrics  map[string]float64 `json:"metrics"`
	Notes    []string           `json:"notes"`
	Failures []string           `json:"failures"`
}

// suite drives one system's clusters through every workload in order.
type suite struct {
	cfg      suiteConfig
	newCl    func(sub string) Cluster
	res      *Results
	val      []byte
	written  atomic.Int64 // "w%07d" keys handed out to writers so far
	readable int64        // keys below this were acknowledged (set after the write runs)

	cl         Cluster // the running cluster
	profileDir string  // save pprof captures here ("" = off)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func wkey(n int64) string { return fmt.Sprintf("w%07d", n%10_000_000) }

// wants says whether workload name is selected by -only (every one when it is empty).
func (s *suite) wants(name string) bool {
	if s.cfg.only == "" {
		return true
	}
	for _, w := range strings.Split(s.cfg.only, ",") {
		if strings.TrimSpace(w) == name {
			return true
		}
	}
	return false
}

func (s *suite) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	log.Printf("[%s] %s", s.res.System, msg)
	s.res.Notes = append(s.res.Notes, msg)
}

func (s *suite) fail(phase string, err error) {
	msg := fmt.Sprintf("%s: %v", phase, err)
	log.Printf("[%s] FAILED %s", s.res.System, msg)
	s.res.Failures = append(s.res.Failures, msg)
}

// record keeps a workload's figures and logs them. servers/client is the servers' CPU
// per operation over the load generator's: the client does the same work for every
// operation against either system, so the quotient holds still when this shared
// machine's speed moves from one minute to the next (by a quarter, bench/README.md),
// where ops/s and µs/op do not.
func (s *suite) record(name string, st Stats) {
	s.res.Stats[name] = st
	perClient := 0.0
	if st.ClientCPUUs > 0 {
		perClient = st.ServerCPUUs / st.ClientCPUUs
	}
	log.Printf("[%s] %-14s clients=%-3d ops/s=%9.1f p50=%7.2fms p99=%7.2fms max=%7.1fms cpu µs/op client=%.1f servers=%.1f servers/client=%.2f errors=%d %s",
		s.res.System, name, st.Clients, st.OpsPerSec, st.P50Ms, st.P99Ms, st.MaxMs, st.ClientCPUUs, st.ServerCPUUs, perClient, st.Errors, st.FirstErr)
}

// load is runLoad counting the running cluster's server CPU per operation too.
func (s *suite) load(ctx context.Context, spec loadSpec) Stats {
	if s.cl != nil {
		spec.pids = s.cl.PIDs()
	}
	return runLoad(ctx, spec)
}

// run executes the whole suite: cluster A for throughput, scans and compaction; a
// fresh cluster B for memory with 1M keys and the join.
func (s *suite) run(ctx context.Context) {
	s.val = randomBytes(s.cfg.valBytes)
	func() {
		cl := s.newCl("a")
		s.cl = cl
		defer cl.Stop()
		if err := cl.Start(ctx); err != nil {
			s.fail("start cluster", err)
			return
		}
		lead, err := cl.Leader(ctx)
		if err != nil {
			s.fail("leader", err)
			return
		}
		for _, w := range []struct {
			name string
			run  func()
		}{
			{"writes", func() { s.writes(ctx, cl.Driver(), lead) }},
			{"reads", func() { s.reads(ctx, cl.Driver(), lead) }},
			{"mixed", func() { s.mixed(ctx, cl.Driver()) }},
			{"scans", func() { s.scans(ctx, cl.Driver(), lead) }},
			{"compaction", func() { s.compaction(ctx, cl.Driver(), lead) }},
			{"leases", func() { s.leases(ctx, cl.Driver(), lead) }},
		} {
			if s.wants(w.name) {
				w.run()
			}
		}
	}()
	if ctx.Err() == nil && s.wants("watch") {
		s.onFresh(ctx, "w", s.watch)
	}
	if ctx.Err() != nil || !s.wants("memory") {
		return
	}
	func() {
		cl := s.newCl("b")
		s.cl = cl
		defer cl.Stop()
		if err := cl.Start(ctx); err != nil {
			s.fail("start cluster b", err)
			return
		}
		lead, err := cl.Leader(ctx)
		if err != nil {
			s.fail("leader b", err)
			return
		}
		if s.memory(ctx, cl, lead) {
			s.join(ctx, cl, lead)
		}
	}()
}

// onFresh runs f on a fresh cluster (data dirs under sub), stopped afterwards.
func (s *suite) onFresh(ctx context.Context, sub string, f func(ctx context.Context, cl Cluster, lead int)) {
	cl := s.newCl(sub)
	s.cl = cl
	defer cl.Stop()
	if err := cl.Start(ctx); err != nil {
		s.fail("start cluster "+sub, err)
		return
	}
	lead, err := cl.Leader(ctx)
	if err != nil {
		s.fail("leader "+sub, err)
		return
	}
	f(ctx, cl, lead)
}

func (s *suite) writeOp(d Driver, node func(w int) int) opFunc {
	return func(ctx context.Context, w int, _ *mrand.Rand) error {
		return d.Put(ctx, node(w), w, wkey(s.written.Add(1)-1), s.val)
	}
}

func (s *suite) readOp(d Driver, node func(w int) int, serializable bool) opFunc {
	return func(ctx context.Context, w int, rng *mrand.Rand) error {
		n := min(s.readable, 10_000_000)
		return d.Get(ctx, node(w), w, wkey(rng.Int64N(n)), serializable)
	}
}

func (s *suite) writes(ctx context.Context, d Driver, lead int) {
	toLeader := func(int) int { return lead }
	for _, c := range []int{1, s.cfg.clients} {
		name := fmt.Sprintf("write%d", c)
		wait := s.profileCPU(ctx, name, lead, s.cfg.warm, int(s.cfg.writeDur.Seconds())-1)
		st := s.load(ctx, loadSpec{clients: c, warm: s.cfg.warm, dur: s.cfg.writeDur, op: s.writeOp(d, toLeader)})
		wait()
		s.record(name, st)
	}
	s.readable = s.written.Load()
}

// reads: one client reads from the leader; many clients spread over all members.
func (s *suite) reads(ctx context.Context, d Driver, lead int) {
	if s.readable == 0 {
		s.fail("reads", errors.New("no keys written"))
		return
	}
	for _, ser := range []bool{false, true} {
		kind := "linread"
		if ser {
			kind = "serread"
		}
		for _, c := range []int{1, s.cfg.clients} {
			node := func(w int) int { return w % 3 }
			if c == 1 {
				node = func(int) int { return lead }
			}
			name := fmt.Sprintf("%s%d", kind, c)
			wait := s.profileCPU(ctx, name, lead, s.cfg.warm, int(s.cfg.readDur.Seconds())-1)
			st := s.load(ctx, loadSpec{clients: c, warm: s.cfg.warm, dur: s.cfg.readDur, op: s.readOp(d, node, ser)})
			wait()
			s.record(name, st)
		}
	}
	if dc, ok := d.(interface{ Dials() int64 }); ok {
		s.note("HTTP connections dialled by the end of the reads: %d (64 workers; more means connections were not reused)", dc.Dials())
	}
}

// mixed: 80% linearizable reads of written keys, 20% new writes; worker w talks to
// member w%3 for both (a follower forwards its writes to the leader).
func (s *suite) mixed(ctx context.Context, d Driver) {
	node := func(w int) int { return w % 3 }
	read, write := s.readOp(d, node, false), s.writeOp(d, node)
	op := func(ctx context.Context, w int, rng *mrand.Rand) error {
		if rng.IntN(100) < 80 {
			return read(ctx, w, rng)
		}
		return write(ctx, w, rng)
	}
	s.record(fmt.Sprintf("mixed%d", s.cfg.clients), s.load(ctx, loadSpec{clients: s.cfg.clients, warm: s.cfg.warm, dur: s.cfg.writeDur, op: op}))
}

func keyJobs(format string, first, n, batch int) []batchJob {
	var jobs []batchJob
	for i := first; i < first+n; i += batch {
		var keys []string
		for j := i; j < min(i+batch, first+n); j++ {
			keys = append(keys, fmt.Sprintf(format, j))
		}
		jobs = append(jobs, batchJob{keys: keys})
	}
	return jobs
}

// scans loads scanKeys keys of scanValBytes under "s/" and pages through all of them
// at one revision, repeatedly, for each page size.
func (s *suite) scans(ctx context.Context, d Driver, lead int) {
	jobs := keyJobs("s/%07d", 0, s.cfg.scanKeys, s.cfg.batch)
	took, err := runBatches(ctx, d, lead, s.cfg.loadClients, jobs, randomBytes(s.cfg.scanValBytes))
	if err != nil {
		s.fail("scan load", err)
		return
	}
	s.note("loaded %d scan keys of %d bytes in %.1fs", s.cfg.scanKeys, s.cfg.scanValBytes, took.Seconds())
	for _, limit := range s.cfg.scanLimits {
		name := fmt.Sprintf("scan%d", limit)
		var keys, pages, runs int
		wait := s.profileCPU(ctx, name, lead, 0, int(s.cfg.scanBudget.Seconds()))
		start := time.Now()
		for runs < s.cfg.scanMaxRuns && (runs == 0 || time.Since(start) < s.cfg.scanBudget) {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			k, p, err := d.Scan(sctx, lead, "s/", limit)
			cancel()
			if err != nil {
				s.fail(name, err)
				return
			}
			if k != s.cfg.scanKeys {
				s.fail(name, fmt.Errorf("scan saw %d keys, want %d", k, s.cfg.scanKeys))
				return
			}
			keys, pages, runs = keys+k, pages+p, runs+1
		}
		secs := time.Since(start).Seconds()
		wait()
		s.res.Metrics[name+".keys_per_sec"] = float64(keys) / secs
		s.res.Metrics[name+".page_ms"] = secs * 1000 / float64(pages)
		s.note("%s: %d full scans, %d pages, %.0f keys/s, %.2f ms/page", name, runs, pages, float64(keys)/secs, secs*1000/float64(pages))
	}
}

// compaction overwrites compactKeys keys until compactVersions versions are superseded,
// measures write latency (compactClients clients) before, then during a compaction of
// all of them. etcd's Compact waits for the physical compaction, and the "during"
// window lasts at least until it returns; keel compacts physically in background
// chunks after the compact command applies, so its window is the fixed compactWindow.
func (s *suite) compaction(ctx context.Context, d Driver, lead int) {
	rounds := s.cfg.compactVersions/s.cfg.compactKeys + 1
	var jobs []batchJob
	for r := 0; r < rounds; r++ {
		jobs = append(jobs, keyJobs("c%07d", 0, s.cfg.compactKeys, s.cfg.batch)...)
	}
	took, err := runBatches(ctx, d, lead, s.cfg.loadClients, jobs, s.val)
	if err != nil {
		s.fail("compaction load", err)
		return
	}
	superseded := (rounds - 1) * s.cfg.compactKeys
	s.res.Metrics["compact.superseded"] = float64(superseded)
	s.note("wrote %d versions of %d keys (%d superseded) in %.1fs", rounds*s.cfg.compactKeys, s.cfg.compactKeys, superseded, took.Seconds())
	rev, err := d.Revision(ctx, lead)
	if err != nil {
		s.fail("compaction revision", err)
		return
	}
	toLeader := func(int) int { return lead }
	before := s.load(ctx, loadSpec{clients: s.cfg.compactClients, warm: s.cfg.warm, dur: s.cfg.writeDur, op: s.writeOp(d, toLeader)})
	s.record("compact_before", before)

	done := make(chan struct{})
	var compactErr error
	var compactTook time.Duration
	go func() {
		defer close(done)
		time.Sleep(s.cfg.warm)
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		compactErr = d.Compact(cctx, lead, rev)
		cancel()
		compactTook = time.Since(t0)
	}()
	wait := s.profileCPU(ctx, "compact_during", lead, s.cfg.warm, int(s.cfg.compactWindow.Seconds()))
	during := s.load(ctx, loadSpec{clients: s.cfg.compactClients, warm: s.cfg.warm, dur: s.cfg.compactWindow, extend: done, op: s.writeOp(d, toLeader)})
	wait()
	s.record("compact_during", during)
	if compactErr != nil {
		s.fail("compact", compactErr)
		return
	}
	s.res.Metrics["compact.call_s"] = compactTook.Seconds()
	if before.P99Ms > 0 {
		s.res.Metrics["compact.p99_ratio"] = during.P99Ms / before.P99Ms
	}
	s.note("compact to revision %d: call returned after %.2fs; write p99 %.2fms before, %.2fms during",
		rev, compactTook.Seconds(), before.P99Ms, during.P99Ms)
}

// memory loads memKeys keys (8-byte keys, valBytes values) into a fresh cluster and
// reads each member's VmRSS after a short settle.
func (s *suite) memory(ctx context.Context, cl Cluster, lead int) bool {
	jobs := keyJobs("m%07d", 0, s.cfg.memKeys, s.cfg.batch)
	took, err := runBatches(ctx, cl.Driver(), lead, s.cfg.loadClients, jobs, s.val)
	if err != nil {
		s.fail("memory load", err)
		return false
	}
	s.note("loaded %d keys of %d bytes in %.1fs", s.cfg.memKeys, s.cfg.valBytes, took.Seconds())
	time.Sleep(5 * time.Second)
	s.profileHeap(ctx, "mem", lead)
	var maxRSS, sum float64
	for i, pid := range cl.PIDs() {
		m, err := readMem(pid)
		if err != nil {
			s.fail("rss", err)
			return false
		}
		mb := float64(m.VmRSS) / (1 << 20)
		s.res.Metrics[fmt.Sprintf("rss.node%d_mb", i)] = mb
		s.res.Metrics[fmt.Sprintf("rss.node%d_anon_mb", i)] = float64(m.RssAnon) / (1 << 20)
		maxRSS = max(maxRSS, mb)
		sum += mb
		s.note("node %d (pid %d): VmRSS %.0f MiB (anon %.0f, file %.0f)", i, pid, mb, float64(m.RssAnon)/(1<<20), float64(m.RssFile)/(1<<20))
	}
	s.res.Metrics["rss.max_mb"] = maxRSS
	s.res.Metrics["rss.mean_mb"] = sum / 3
	return true
}

// join writes a sentinel key, starts a fourth member and times until the new member
// serves the sentinel from its local state (a serializable read).
func (s *suite) join(ctx context.Context, cl Cluster, lead int) {
	d := cl.Driver()
	if err := d.Put(ctx, lead, 0, "join-sentinel", s.val); err != nil {
		s.fail("join sentinel", err)
		return
	}
	t0 := time.Now()
	node, err := cl.Join(ctx)
	if err != nil {
		s.fail("join", err)
		return
	}
	var last error
	for time.Since(t0) < s.cfg.joinLimit && ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = d.Get(gctx, node, 0, "join-sentinel", true)
		cancel()
		if last == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		s.fail("join catch-up", fmt.Errorf("new member did not serve the sentinel within %v: %w", s.cfg.joinLimit, last))
		return
	}
	secs := time.Since(t0).Seconds()
	s.res.Metrics["join.catchup_s"] = secs
	snap := logMentions(cl.LogPath(node), "applied snapshot", "saved database snapshot", "installed remote snapshot", "installing snapshot")
	s.note("new member caught up in %.2fs (snapshot install seen in its log: %v)", secs, snap)
	if m, err := readMem(cl.PIDs()[node]); err == nil {
		s.res.Metrics["rss.joined_mb"] = float64(m.VmRSS) / (1 << 20)
	}
}

// logMentions reports whether a node's log mentions one of the phrases (used to tell
// whether a join was served by a snapshot).
func logMentions(path string, phrases ...string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	low := strings.ToLower(string(b))
	for _, p := range phrases {
		if strings.Contains(low, strings.ToLower(p)) {
			return true
		}
	}
	return false
}
