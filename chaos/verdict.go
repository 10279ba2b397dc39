package chaos

import "time"

// RunData is everything a finished run recorded that the checks read: the history,
// the store's MVCC history read back from one node, every node's final keyspace, and
// the fault plan with what became of it.
type RunData struct {
	Records  []Record
	Keys     []string // the workload's keys and the verifier's final key
	Prefix   string
	Timeline *Timeline
	Nodes    []NodeState
	Specs    []FaultSpec
	Schedule Schedule
	Events   []FaultEvent
	Watches  []WatchLog // what each watcher received (CheckWatches)
	Leases   *LeaseLog  // what the lease and lock clients did (CheckLeases; nil: not run)
}

// CheckRun runs every check of a finished run that needs no cluster: the history
// (Check), the floors (CheckFloors) and every node's final state against the history
// (CheckNodes). The run passes when the report is OK and there are no problems.
// RunScenario decides with it, and the checker's self-test feeds it corrupted runs.
func CheckRun(d RunData, floors Floors, timeout time.Duration) (Report, RunCounts, []string) {
	counts, problems := CheckFloors(d.Records, d.Specs, d.Schedule, d.Events, floors)
	rep := Check(d.Records, d.Keys, d.Prefix, d.Timeline, timeout)
	rep.Annotate(d.Events)
	resolved, _ := Resolve(d.Records, d.Timeline, d.Prefix)
	if len(d.Nodes) == 0 {
		problems = append(problems, "no node's final state was read: nothing checked node by node")
	}
	problems = append(problems, CheckNodes(resolved, d.Timeline, d.Nodes, d.Prefix)...)
	var wp []string
	counts.Watch, wp = CheckWatches(d.Watches, d.Timeline, d.Prefix, floors)
	problems = append(problems, wp...)
	counts.Lease, wp = CheckLeases(d.Leases, d.Timeline, d.Records, d.Events)
	problems = append(problems, wp...)
	return rep, counts, problems
}
