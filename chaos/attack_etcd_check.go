package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// sample reads every running node's RSS (/proc) and goroutines (/metrics).
func (a *attacker) sample(ctx context.Context) {
	e := a.etcd
	for _, id := range a.c.Members() {
		pid, paused := a.c.pidOf(id)
		if pid == 0 {
			continue
		}
		rss, rerr := procRSS(pid)
		g := -1
		if !paused {
			mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if m, err := a.c.Client(id).Metrics(mctx); err == nil {
				g = metricValue(m, "go_goroutines")
			}
			cancel()
		}
		key := fmt.Sprintf("%s/%d", id, pid)
		e.mu.Lock()
		s := e.samples[key]
		if s == nil {
			s = &nodeSample{node: id, pid: pid, firstRSS: -1}
			e.samples[key] = s
		}
		if rerr == nil {
			if s.firstRSS < 0 {
				s.firstRSS = rss
			}
			s.maxRSS = max(s.maxRSS, rss)
			s.rssReads++
		} else {
			e.sampleErrs++
		}
		if g >= 0 {
			s.maxGoroutines = max(s.maxGoroutines, g)
			s.goroutineRd++
			e.goroutineReadings++
		}
		e.mu.Unlock()
	}
}

// pidOf is node id's process ID (0 when it is not running) and whether it is paused.
func (c *ProcCluster) pidOf(id string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.mu.nodes[id]
	if n == nil || !n.running || n.cmd == nil || n.cmd.Process == nil {
		return 0, false
	}
	return n.cmd.Process.Pid, n.paused
}

// procRSS is the resident set of process pid, in bytes (VmRSS).
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, errors.New("no VmRSS")
}

// metricValue is the value of an unlabelled metric in a Prometheus text exposition
// (-1 when absent).
func metricValue(text []byte, name string) int {
	for line := range strings.SplitSeq(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return -1
}

// checkEtcd is the etcd attack's part of attacker.check (see the top of attack_etcd.go).
func (a *attacker) checkEtcd(ctx context.Context) []string {
	e := a.etcd
	if e == nil {
		return nil
	}
	a.sample(ctx) // once more, after the attack
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, "attacker: etcd: "+fmt.Sprintf(format, args...))
	}
	aliveID, lost, gone := a.aliveGone(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]string, 0, len(e.samples))
	for k := range e.samples {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := e.samples[k]
		a.logf("attacker: etcd: node %s (pid %d): RSS %d -> at most %d MiB in %d readings, at most %d goroutines in %d",
			s.node, s.pid, s.firstRSS>>20, s.maxRSS>>20, s.rssReads, s.maxGoroutines, s.goroutineRd)
		if s.rssReads > 0 && s.maxRSS-s.firstRSS >= etcdMaxRSSGrowth {
			add("node %s (pid %d) grew from %d to %d MiB of RSS under the attack, %d MiB or more", s.node, s.pid,
				s.firstRSS>>20, s.maxRSS>>20, etcdMaxRSSGrowth>>20)
		}
		if s.maxGoroutines >= etcdMaxGoroutines {
			add("node %s (pid %d) ran %d goroutines under the attack, %d or more", s.node, s.pid, s.maxGoroutines, etcdMaxGoroutines)
		}
	}
	if e.goroutineReadings == 0 {
		add("no node's goroutines were read (/metrics): their bound proved nothing")
	}
	a.logf("attacker: etcd: progress flood %d requests on %d unread streams; idle Watch streams %d opened, %d refused (ResourceExhausted), "+
		"%d ended, %d waited to the end for their connection; health Watch streams without a token %d served, %d refused, %d ended; "+
		"open at the end (the client's view) %v; huge metadata refused %q, served %q, %d tries inconclusive",
		e.progressSent.Load(), e.progressStreams.Load(), e.idleOpened.Load(), e.idleRefused.Load(), e.idleEnded.Load(),
		e.idleWaited.Load(), e.healthServing.Load(), e.healthRefused.Load(), e.healthEnded.Load(), e.held,
		e.metaRefused, e.metaServed, e.metaInconclusive)
	a.logf("attacker: etcd: leases: %d workload leases attacked; refused (PermissionDenied) %v, of the kept-alive lease %x %v; "+
		"other errors %v; tenant controls %d ok, failed %q", len(e.leaseTargets), e.leaseRefused, aliveID, e.aliveRefused,
		e.leaseOther, e.tenantControlsOK, e.tenantControls)
	if e.progressSent.Load() == 0 {
		add("no progress request was sent")
	}
	if e.idleOpened.Load() == 0 || e.healthServing.Load() == 0 {
		add("%d idle Watch and %d health Watch streams were opened: the stream attack proved nothing",
			e.idleOpened.Load(), e.healthServing.Load())
	}
	if e.idleRefused.Load()+e.healthRefused.Load() == 0 {
		add("no stream was refused: the attacker never reached the %d streams one client may hold", maxStreamsPerClient)
	}
	for _, s := range e.metaServed {
		add("a Range with %d KiB of metadata was served by %s", etcdHugeMetadata>>10, s)
	}
	if len(e.metaRefused) == 0 {
		add("no node answered the Range with huge metadata conclusively (%d tries)", e.metaInconclusive)
	}
	// Once a fault took the kept-alive lease away, its right answer is LeaseNotFound,
	// not PermissionDenied: a token that only tried after that proved nothing either
	// way, as the lease's survival says nothing (below).
	for _, tok := range []string{roTokenName, tenantTokenName} {
		for _, op := range []string{"revoke", "keepalive", "timetolive"} {
			if aliveID == 0 || e.aliveRefused[tok+" "+op] > 0 {
				continue
			}
			if lost != "" {
				a.logf("attacker: etcd: the %s token's %s of the workload's kept-alive lease was never refused, and the lease was lost to a fault", tok, op)
				continue
			}
			add("the %s token's %s of the workload's kept-alive lease was never refused (PermissionDenied)", tok, op)
		}
	}
	if aliveID == 0 {
		add("the workload's kept-alive lease is unknown: its leases were not attacked")
	}
	for _, c := range e.tenantControls {
		add("tenant control: %s", c)
	}
	if e.tenantControlsOK == 0 {
		add("no control of the tenant's own lease succeeded: the lease calls proved nothing")
	}
	a.checkBytes(add)
	switch {
	case gone != nil:
		add("%v", gone)
	case lost != "":
		a.logf("attacker: etcd: the workload's kept-alive lease %x was lost to a fault (%s): its survival says nothing", aliveID, lost)
	}
	return problems
}

// maxStreamsPerClient is the agent's default -max-conns-per-client: the streams and
// connections one client address may hold of a node.
const maxStreamsPerClient = 2500

// aliveGone asks, with the management token, whether the workload's kept-alive lease
// is still granted: an error unless it is, or the workload's KeepAlive reported it
// lost (lost).
func (a *attacker) aliveGone(ctx context.Context) (id int64, lost string, gone error) {
	e := a.etcd
	if e.leases == nil {
		return 0, "", nil
	}
	e.leases.mu.Lock()
	id, lost = e.leases.log.AliveID, e.leases.log.Lost
	e.leases.mu.Unlock()
	if id == 0 {
		return 0, "", nil
	}
	var last error
	for _, n := range a.c.Members() {
		cc, err := e.conn(e.srcCalls, a.c.EtcdAddr(n), false)
		if err != nil {
			last = err
			continue
		}
		cctx, cancel := context.WithTimeout(withToken(ctx, a.c.Token()), etcdCallTimeout)
		t, err := pb.NewLeaseClient(cc).LeaseTimeToLive(cctx, &pb.LeaseTimeToLiveRequest{ID: id})
		cancel()
		cc.Close()
		switch {
		case err != nil:
			last = err
			continue
		case t.TTL > 0:
			return id, "", nil
		case lost != "":
			return id, lost, nil
		}
		return id, lost, fmt.Errorf("the workload's kept-alive lease %x is gone after the run (ttl %d on %s) and its KeepAlive never reported it lost",
			id, t.TTL, n)
	}
	return id, lost, fmt.Errorf("the workload's kept-alive lease %x could not be looked up after the run: %v", id, last)
}
