package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// FaultEvent is one fault as it happened: when (history clock), what it resolved to,
// and whether injecting it (Err) or healing it (HealErr) failed. A fault with an Err
// was not in place: it does not count as injected.
type FaultEvent struct {
	Start, End int64
	Step       Step
	Desc       string
	Err        string
	HealErr    string
}

// FaultRunner plays a Schedule against a cluster, one step at a time.
type FaultRunner struct {
	c    Cluster
	h    *History
	logf func(format string, args ...any)
	ff   failFast // probes of cut-off nodes (failfast.go)

	mu struct {
		sync.Mutex
		events []FaultEvent
	}
}

// NewFaultRunner returns a runner stamping events with h's clock.
func NewFaultRunner(c Cluster, h *History, logf func(string, ...any)) *FaultRunner {
	return &FaultRunner{c: c, h: h, logf: logf}
}

// Events returns the faults injected so far.
func (r *FaultRunner) Events() []FaultEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]FaultEvent(nil), r.mu.events...)
}

// Injected counts the faults that were injected without error.
func (r *FaultRunner) Injected() int {
	n := 0
	for _, e := range r.Events() {
		if e.Err == "" {
			n++
		}
	}
	return n
}

// Run plays every step: waits until its offset from now, injects, holds, heals. A
// step that cannot be injected (no leader to kill, a node that is not running, a rule
// that would not apply) is recorded with its error and skipped; CheckFloors fails a run
// in which some spec was never injected. When
// ctx ends the current fault is still healed before Run returns.
func (r *FaultRunner) Run(ctx context.Context, sch Schedule) {
	t0 := time.Now()
	for _, st := range sch.Steps {
		if !sleepCtx(ctx, time.Until(t0.Add(st.At))) {
			return
		}
		ev := FaultEvent{Start: r.h.Now(), Step: st}
		desc, heal, err := r.inject(ctx, st)
		ev.Desc = desc
		if err != nil {
			if heal != nil {
				heal() // undo whatever part took effect
			}
			ev.Err = err.Error()
			ev.End = r.h.Now()
			r.logf("fault %s: %s: not injected: %v", st, desc, err)
			r.record(ev)
			continue
		}
		r.logf("fault %s: %s", st, desc)
		sleepCtx(ctx, st.Hold)
		if heal != nil {
			if err := heal(); err != nil {
				ev.HealErr = err.Error()
				r.logf("fault %s: heal failed: %v", desc, err)
			}
		}
		ev.End = r.h.Now()
		r.record(ev)
	}
}

func (r *FaultRunner) record(ev FaultEvent) {
	r.mu.Lock()
	r.mu.events = append(r.mu.events, ev)
	r.mu.Unlock()
}

// sleepCtx sleeps d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// resolve picks the node a step targets, with the step's own random source.
func (r *FaultRunner) resolve(ctx context.Context, t Target, rng *rand.Rand) (string, error) {
	members := r.c.Members()
	switch t {
	case TargetLeader, TargetFollower:
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		leader, err := WaitLeader(lctx, r.c)
		if err != nil || t == TargetLeader {
			return leader, err
		}
		var fs []string
		for _, id := range members {
			if id != leader {
				fs = append(fs, id)
			}
		}
		if len(fs) == 0 {
			return "", errors.New("no follower")
		}
		return fs[rng.Intn(len(fs))], nil
	case TargetDisk:
		if id := r.c.DiskNode(); id != "" {
			return id, nil
		}
		return "", ErrUnsupported
	default:
		return members[rng.Intn(len(members))], nil
	}
}

func others(members []string, id string) []string {
	var out []string
	for _, m := range members {
		if m != id {
			out = append(out, m)
		}
	}
	return out
}

// inject applies one step and returns what it did and how to undo it.
func (r *FaultRunner) inject(ctx context.Context, st Step) (string, func() error, error) {
	if !r.c.Supports(st.Kind) {
		return string(st.Kind), nil, ErrUnsupported
	}
	rng := rand.New(rand.NewSource(st.Seed))
	members := r.c.Members()
	var id string
	if st.Target != TargetNone {
		var err error
		if id, err = r.resolve(ctx, st.Target, rng); err != nil {
			return fmt.Sprintf("%s %s", st.Kind, st.Target), nil, err
		}
	}
	who := fmt.Sprintf("%s (%s)", id, st.Target)
	net := r.c.Net()
	needNet := func() error {
		if net == nil {
			return ErrUnsupported
		}
		return nil
	}
	switch st.Kind {
	case FaultKill:
		return "kill -9 " + who, func() error { return r.c.Start(ctx, id) }, r.c.Kill(id)
	case FaultPause:
		return "SIGSTOP " + who, func() error { return r.c.Resume(id) }, r.c.Pause(id)
	case FaultIsolate:
		if err := needNet(); err != nil {
			return "isolate " + who, nil, err
		}
		return "isolate " + who, r.watchCutOff([]string{id}, healNet(net)), net.Partition([]string{id}, others(members, id))
	case FaultSplit:
		if err := needNet(); err != nil {
			return "split", nil, err
		}
		min, maj := SplitSides(rng, members)
		return fmt.Sprintf("split %v | %v", min, maj), r.watchCutOff(min, healNet(net)), net.Partition(min, maj)
	case FaultOneWay:
		if err := needNet(); err != nil {
			return "one-way", nil, err
		}
		peers := others(members, id)
		peer := peers[rng.Intn(len(peers))]
		if st.Target == TargetFollower { // a follower that cannot reach its leader
			if leader, err := r.resolve(ctx, TargetLeader, rng); err == nil && leader != id {
				peer = leader
			}
		}
		return fmt.Sprintf("one-way: %s cannot reach %s (%s still reaches %s)", who, peer, peer, id), healNet(net),
			net.SetLink(id, peer, LinkFault{Blackhole: true})
	case FaultBridge:
		if err := needNet(); err != nil {
			return "bridge", nil, err
		}
		left, bridge, right := BridgeSides(rng, members)
		return fmt.Sprintf("bridge %v - %s - %v", left, bridge, right), healNet(net), net.Partition(left, right)
	case FaultDelay, FaultDrop:
		if err := needNet(); err != nil {
			return string(st.Kind), nil, err
		}
		f := LinkFault{Delay: st.Delay, Jitter: st.Jitter, DropRate: st.DropRate}
		return fmt.Sprintf("%s on every raft link: %+v", st.Kind, f), healNet(net), net.SetAll(members, f)
	case FaultDiskFull:
		return "fill the disk of " + who, func() error { return r.c.FreeDisk(id) }, r.c.FillDisk(id)
	case FaultLogIO:
		heal, err := r.c.FailLog(ctx, id, st.LogFault)
		if d, ok := slowLogFault(st.LogFault); ok {
			return fmt.Sprintf("slow every raft log fdatasync of %s by %s", who, d), heal, err
		}
		return fmt.Sprintf("fail the raft log %ss of %s", st.LogFault, who), heal, err
	case FaultCorruptLog:
		heal, err := r.c.CorruptLog(ctx, id)
		return "corrupt the raft log of " + who + " while it is down; rebuild it from its peers", heal, err
	case FaultLoseState:
		heal, err := r.c.LoseState(ctx, id, st.Part)
		return fmt.Sprintf("delete raft/%s of %s while it is down; rebuild it from its peers", st.Part, who), heal, err
	case FaultAdd, FaultRemove, FaultReplace:
		desc, err := r.changeMembership(ctx, st.Kind, id)
		return desc, nil, err
	}
	return string(st.Kind), nil, fmt.Errorf("unknown fault kind %q", st.Kind)
}

func healNet(n NetFaults) func() error { return n.Heal }

// changeMembership adds, removes or replaces a voter and waits until the leader's
// configuration shows it (these faults are permanent: there is nothing to heal).
func (r *FaultRunner) changeMembership(ctx context.Context, kind FaultKind, id string) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var desc string
	if kind == FaultAdd || kind == FaultReplace {
		added, err := r.c.AddNode(wctx)
		if err != nil {
			return "add a voter", err
		}
		desc = "add voter " + added
		if err := WaitVoters(wctx, r.c, r.c.Members()); err != nil {
			return desc, err
		}
	}
	if kind == FaultRemove || kind == FaultReplace {
		if desc != "" {
			desc += ", then "
		}
		desc += "remove voter " + id
		if err := r.c.RemoveNode(wctx, id); err != nil {
			return desc, err
		}
		if err := WaitVoters(wctx, r.c, r.c.Members()); err != nil {
			return desc, err
		}
	}
	return desc, nil
}

// Annotations turns fault events into porcupine annotations (a "faults" lane in the
// visualization).
func Annotations(events []FaultEvent) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, e := range events {
		bg := "#f4b6b6"
		if e.Err != "" {
			bg = "#dddddd"
		}
		out = append(out, porcupine.Annotation{Tag: "faults", Start: e.Start, End: e.End,
			Description: e.Desc, Details: strings.TrimSpace(e.Step.String() + " " + e.Err + " " + e.HealErr), BackgroundColor: bg})
	}
	return out
}
