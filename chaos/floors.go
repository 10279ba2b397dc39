package chaos

import "fmt"

// Floors are the least a run must have done for its checks to prove anything. An
// empty history is linearizable and a fault that never landed breaks nothing, so a
// run below a floor fails just as a run that broke a rule does.
type Floors struct {
	// AckedWrites is the least number of acknowledged writes: puts, CAS and txns
	// whose guard held, deletes that deleted (the verifier's final write not counted).
	AckedWrites int
	// LinearizableReads is the least number of successful linearizable reads (gets
	// and scans).
	LinearizableReads int
	// OpsPerFault is the least number of client operations whose [call, return]
	// overlaps each injected fault's window (from inject to heal).
	OpsPerFault int
	// Watchers is the least number of watchers that ran, WatchEvents the least
	// number of events each received (CheckWatches).
	Watchers, WatchEvents int
}

// DefaultFloors are set well below what a healthy run does on 2 busy cores (well over
// a thousand acknowledged writes and linearizable reads) and far above what a run whose
// traffic silently did not happen leaves behind. OpsPerFault is one per client of the
// default workload: a client that is running overlaps every fault window of a second or
// more (its operations follow each other with pauses under 200 ms, each bounded by the
// 2 s OpTimeout), so fewer means clients stopped. It cannot be much higher: while the
// leader is frozen every client waits out one operation for the whole window (7
// operations overlapped a 2 s leader pause in one run).
func DefaultFloors() Floors {
	return Floors{AckedWrites: 200, LinearizableReads: 200, OpsPerFault: 6, Watchers: 2, WatchEvents: 100}
}

// RunCounts is what CheckFloors counted, for the run's summary.
type RunCounts struct {
	AckedWrites, LinearizableReads int
	MinOpsPerFault                 int // over the injected faults (-1 when none)
	Watch                          WatchCounts
	Lease                          LeaseCounts
}

// CheckFloors checks a finished run against f: enough acknowledged writes and
// linearizable reads, every spec of specs laid out in sch and injected at least once
// without error, every injected fault overlapped by enough operations, and every
// fault healed. It returns the counts and one message per floor not met.
func CheckFloors(records []Record, specs []FaultSpec, sch Schedule, events []FaultEvent, f Floors) (RunCounts, []string) {
	var out []string
	cnt := RunCounts{MinOpsPerFault: -1}
	for i := range records {
		r := &records[i]
		if r.Client == FinalClient || r.Outcome != OutcomeOK {
			continue
		}
		switch {
		case r.Kind == OpPut, r.Kind == OpCAS && r.Succeeded, r.Kind == OpTxn && r.Succeeded,
			r.Kind == OpDelete && r.Deleted > 0:
			cnt.AckedWrites++
		case r.Kind == OpGet, r.Kind == OpScan:
			cnt.LinearizableReads++
		}
	}
	if cnt.AckedWrites < f.AckedWrites {
		out = append(out, fmt.Sprintf("floor: %d acknowledged writes, want >= %d", cnt.AckedWrites, f.AckedWrites))
	}
	if cnt.LinearizableReads < f.LinearizableReads {
		out = append(out, fmt.Sprintf("floor: %d successful linearizable reads, want >= %d", cnt.LinearizableReads, f.LinearizableReads))
	}
	steps := make([]int, len(specs))
	for _, st := range sch.Steps {
		if st.Spec >= 0 && st.Spec < len(steps) {
			steps[st.Spec]++
		}
	}
	injected := make([]int, len(specs))
	lastErr := make([]string, len(specs))
	for _, e := range events {
		si := e.Step.Spec
		if e.HealErr != "" {
			out = append(out, fmt.Sprintf("fault %s (%s) was not healed: %s", e.Step, e.Desc, e.HealErr))
		}
		if e.Err != "" {
			if si >= 0 && si < len(specs) {
				lastErr[si] = e.Err
			}
			continue
		}
		if si >= 0 && si < len(specs) {
			injected[si]++
		}
		n := overlapping(records, e.Start, e.End)
		if cnt.MinOpsPerFault < 0 || n < cnt.MinOpsPerFault {
			cnt.MinOpsPerFault = n
		}
		if n < f.OpsPerFault {
			out = append(out, fmt.Sprintf("floor: %d operations overlap fault %s (%s), want >= %d", n, e.Step, e.Desc, f.OpsPerFault))
		}
	}
	for i, sp := range specs {
		switch {
		case steps[i] == 0:
			out = append(out, fmt.Sprintf("fault spec #%d (%s %s) has no step in the schedule: the window is too short for it", i, sp.Kind, sp.Target))
		case injected[i] == 0:
			out = append(out, fmt.Sprintf("fault spec #%d (%s %s) was never injected (%d steps; last error: %s)", i, sp.Kind, sp.Target, steps[i], lastErr[i]))
		}
	}
	return cnt, out
}

// overlapping counts the client operations (not the verifier's) whose interval
// overlaps [start, end].
func overlapping(records []Record, start, end int64) int {
	n := 0
	for i := range records {
		r := &records[i]
		if r.Client != FinalClient && r.Call <= end && r.Return >= start {
			n++
		}
	}
	return n
}
