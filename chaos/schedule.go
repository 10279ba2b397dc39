package chaos

import (
	"fmt"
	"math/rand"
	"strings"
	"time"
)

// FaultKind names one kind of fault the harness can inject and heal.
type FaultKind string

const (
	FaultKill     FaultKind = "kill"      // kill -9 the target, restart it after Hold
	FaultPause    FaultKind = "pause"     // SIGSTOP the target for Hold (> election timeout), then SIGCONT
	FaultIsolate  FaultKind = "isolate"   // cut the target off from every other node, both ways
	FaultSplit    FaultKind = "split"     // a random minority against the majority, both ways
	FaultOneWay   FaultKind = "one-way"   // the target cannot reach one peer; that peer still reaches it
	FaultBridge   FaultKind = "bridge"    // two halves that only a bridge node connects (majorities ring)
	FaultDelay    FaultKind = "delay"     // every raft link delays each message by Delay±Jitter
	FaultDrop     FaultKind = "drop"      // every raft link loses messages at DropRate
	FaultAdd      FaultKind = "add"       // a new node joins as a voter (permanent)
	FaultRemove   FaultKind = "remove"    // the target voter is removed and stopped (permanent)
	FaultReplace  FaultKind = "replace"   // a new voter joins, then the target is removed
	FaultDiskFull FaultKind = "disk-full" // the target's data dir (a small tmpfs) fills up for Hold
	FaultLogIO    FaultKind = "log-io"    // the target's Raft log gets I/O errors (LogFault: sync or write) or a slow disk (slow=DUR) for Hold
	// FaultCorruptLog kills the target, damages its Raft log (not a torn write), checks
	// that it refuses to start, then rebuilds it with `keel rebuild` and restarts it.
	FaultCorruptLog FaultKind = "corrupt-log"
	// FaultLoseState kills the target, deletes one part of its Raft state (Part: the
	// WAL or raft.db), checks that it refuses to start, then rebuilds it as
	// FaultCorruptLog does.
	FaultLoseState FaultKind = "lose-raft-state"
)

// Target says which node a fault hits; it is resolved when the fault fires.
type Target string

const (
	TargetLeader   Target = "leader"   // the current leader
	TargetFollower Target = "follower" // a follower, picked with the step's seed
	TargetRandom   Target = "random"   // any node, picked with the step's seed
	TargetDisk     Target = "disk"     // the node whose data dir is a tmpfs
	TargetNone     Target = ""         // the fault has no single target (split, delay...)
)

// Step is one fault of a schedule: at At after traffic starts, inject Kind on Target,
// hold it for Hold, then heal it. Seed drives every random choice of the step (which
// follower, which minority), so a schedule replays exactly from the scenario seed.
type Step struct {
	At       time.Duration
	Kind     FaultKind
	Target   Target
	Hold     time.Duration
	Seed     int64
	Spec     int           // index of the FaultSpec this step came from
	Delay    time.Duration // FaultDelay
	Jitter   time.Duration // FaultDelay
	DropRate float64       // FaultDrop: probability per forwarded chunk
	LogFault string        // FaultLogIO: which operations fail, "sync" or "write", or "slow=DUR"
	Part     string        // FaultLoseState: what is deleted, "wal" or "raft.db"
}

func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "+%s %s", s.At.Round(time.Millisecond), s.Kind)
	if s.Target != TargetNone {
		fmt.Fprintf(&b, " %s", s.Target)
	}
	fmt.Fprintf(&b, " for %s", s.Hold.Round(time.Millisecond))
	if s.Delay > 0 {
		fmt.Fprintf(&b, " delay=%s±%s", s.Delay, s.Jitter)
	}
	if s.DropRate > 0 {
		fmt.Fprintf(&b, " drop=%.2f", s.DropRate)
	}
	if s.LogFault != "" {
		fmt.Fprintf(&b, " fail=%s", s.LogFault)
	}
	if s.Part != "" {
		fmt.Fprintf(&b, " part=%s", s.Part)
	}
	return b.String()
}

// Schedule is the whole fault plan of one scenario run.
type Schedule struct {
	Seed  int64
	Steps []Step
}

func (s Schedule) String() string {
	parts := make([]string, len(s.Steps))
	for i, st := range s.Steps {
		parts[i] = st.String()
	}
	return fmt.Sprintf("seed %d: [%s]", s.Seed, strings.Join(parts, "; "))
}

// End is when the last step heals.
func (s Schedule) End() time.Duration {
	var end time.Duration
	for _, st := range s.Steps {
		if e := st.At + st.Hold; e > end {
			end = e
		}
	}
	return end
}

// FaultSpec describes one kind of step a scenario repeats: which fault, on what, held
// for a random time in [HoldMin, HoldMax], with a quiet gap in [GapMin, GapMax] before it.
type FaultSpec struct {
	Kind             FaultKind
	Target           Target
	HoldMin, HoldMax time.Duration
	GapMin, GapMax   time.Duration
	Delay, Jitter    time.Duration
	DropRate         float64
	LogFault         string // FaultLogIO: "sync" (fdatasync fails), "write" (writes fail, torn) or "slow=DUR" (fdatasync takes DUR longer)
	Part             string // FaultLoseState: "wal" (raft/wal/) or "raft.db" (raft/raft.db)
	Max              int    // at most this many steps of this spec (0 = no limit)
}

// NewSchedule lays out steps from specs, round robin, one at a time (steps never
// overlap: each heals before the next starts), all healed by window. The same seed
// and specs give the same schedule.
func NewSchedule(seed int64, window time.Duration, specs ...FaultSpec) Schedule {
	rng := rand.New(rand.NewSource(seed))
	sch := Schedule{Seed: seed}
	counts := make([]int, len(specs))
	at := time.Duration(0)
	for i := 0; len(specs) > 0; i++ {
		si := i % len(specs)
		spec := specs[si]
		if spec.Max > 0 && counts[si] >= spec.Max {
			if allDone(specs, counts) {
				break
			}
			continue
		}
		gap := between(rng, spec.GapMin, spec.GapMax)
		hold := between(rng, spec.HoldMin, spec.HoldMax)
		if at+gap+hold > window {
			break
		}
		at += gap
		sch.Steps = append(sch.Steps, Step{
			At: at, Kind: spec.Kind, Target: spec.Target, Hold: hold, Seed: rng.Int63(), Spec: si,
			Delay: spec.Delay, Jitter: spec.Jitter, DropRate: spec.DropRate, LogFault: spec.LogFault, Part: spec.Part,
		})
		counts[si]++
		at += hold
	}
	return sch
}

func allDone(specs []FaultSpec, counts []int) bool {
	for i, s := range specs {
		if s.Max == 0 || counts[i] < s.Max {
			return false
		}
	}
	return true
}

// between returns a duration uniformly in [lo, hi] (lo when hi <= lo).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int63n(int64(hi-lo)+1))
}

// SplitSides deterministically splits nodes into a minority and a majority (the
// minority has at least one node and fewer than half).
func SplitSides(rng *rand.Rand, nodes []string) (minority, majority []string) {
	shuffled := append([]string(nil), nodes...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	maxMinority := (len(nodes) - 1) / 2
	if maxMinority < 1 {
		maxMinority = 1
	}
	n := 1 + rng.Intn(maxMinority)
	return shuffled[:n], shuffled[n:]
}

// BridgeSides deterministically picks a bridge node and two halves it alone connects:
// with 5 nodes {a,b} - c - {d,e}: every node sees a majority (itself, its half, the
// bridge) but the halves cannot see each other — Jepsen's "majorities ring" bridge.
func BridgeSides(rng *rand.Rand, nodes []string) (left []string, bridge string, right []string) {
	shuffled := append([]string(nil), nodes...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	bridge = shuffled[0]
	rest := shuffled[1:]
	half := len(rest) / 2
	return rest[:half], bridge, rest[half:]
}
