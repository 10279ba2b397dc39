package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// The checker's self-test: CheckRun, what RunScenario decides with, must pass a clean
// synthetic run and fail the same run corrupted in each way a broken keel could
// corrupt it. A checker that passes everything passes these runs too — and fails here.

// cleanRun is a simulated linearizable run on three nodes with one fault spec that was
// injected once, overlapped by plenty of operations.
func cleanRun(t *testing.T) RunData {
	t.Helper()
	keys := []string{"k/0", "k/1", "k/2", "k/3", "k/4", "k/5", "k/6", "k/7"}
	records, tl := simulate(7, 3000, 6, 30, keys)
	if len(records) == 0 {
		t.Fatal("simulate returned no records")
	}
	end := records[len(records)-1].Return
	spec := FaultSpec{Kind: FaultKill, Target: TargetLeader, HoldMin: time.Second, HoldMax: time.Second}
	step := Step{At: time.Second, Kind: FaultKill, Target: TargetLeader, Hold: time.Second, Spec: 0}
	d := RunData{
		Records: records, Keys: keys, Prefix: "k/", Timeline: tl,
		Specs: []FaultSpec{spec}, Schedule: Schedule{Seed: 7, Steps: []Step{step}},
		Events: []FaultEvent{{Start: end / 4, End: end / 2, Step: step, Desc: "kill -9 n1 (leader)"}},
	}
	d.Leases = addLeases(tl, records)
	for _, id := range []string{"n1", "n2", "n3"} {
		d.Nodes = append(d.Nodes, NodeState{Node: id, Revision: tl.To, KVs: tl.Keyspace(tl.To)})
	}
	d.Watches = []WatchLog{faithfulWatch(0, tl, 1), faithfulWatch(1, tl, tl.To/3)}
	return d
}

// selfTestFloors are low enough for the simulated run (3000 steps, a fifth of them
// acknowledged writes and a fifth linearizable reads).
var selfTestFloors = Floors{AckedWrites: 100, LinearizableReads: 100, OpsPerFault: 10, Watchers: 2, WatchEvents: 100}

// verdict runs CheckRun and returns every failure, report violations and problems.
func verdict(t *testing.T, d RunData) []string {
	t.Helper()
	rep, _, problems := CheckRun(d, selfTestFloors, time.Minute)
	out := append([]string(nil), problems...)
	out = append(out, rep.Violations...)
	if !rep.OK() && len(rep.Violations) == 0 {
		out = append(out, "report not OK: "+rep.String())
	}
	return out
}

func wantFailure(t *testing.T, name string, got []string, substr string) {
	t.Helper()
	if len(got) == 0 {
		t.Fatalf("%s: the run passed, want a failure mentioning %q", name, substr)
	}
	for _, g := range got {
		if strings.Contains(g, substr) {
			return
		}
	}
	t.Fatalf("%s: failures %q, want one mentioning %q", name, got, substr)
}

func TestSelfTestCleanRunPasses(t *testing.T) {
	d := cleanRun(t)
	if got := verdict(t, d); len(got) != 0 {
		t.Fatalf("clean simulated run failed: %q", got)
	}
	if len(d.Nodes[0].KVs) == 0 {
		t.Fatal("the simulated final keyspace is empty: the node checks would check nothing")
	}
}

// lastAckedPut finds the last acknowledged put of the history and its index.
func lastAckedPut(t *testing.T, records []Record) int {
	t.Helper()
	for i := len(records) - 1; i >= 0; i-- {
		if records[i].Kind == OpPut && records[i].Outcome == OutcomeOK {
			return i
		}
	}
	t.Fatal("no acknowledged put in the history")
	return -1
}

func TestSelfTestLostWriteOnOneNodeFails(t *testing.T) {
	d := cleanRun(t)
	acked := map[string]bool{}
	for _, r := range d.Records {
		if r.Outcome == OutcomeOK && (r.Kind == OpPut || r.Succeeded) {
			acked[r.Value], acked[r.Value2] = true, true
		}
	}
	// n2 lost an acknowledged write that is still the key's latest: the key is gone.
	kvs := d.Nodes[1].KVs[:0:0]
	lost := ""
	for _, kv := range d.Nodes[1].KVs {
		if lost == "" && acked[string(kv.Value)] {
			lost = kv.Key
			continue
		}
		kvs = append(kvs, kv)
	}
	if lost == "" {
		t.Fatal("no acknowledged write in the final state to lose")
	}
	d.Nodes[1].KVs = kvs
	got := verdict(t, d)
	wantFailure(t, "lost write on n2", got, "node n2: acknowledged write lost")
	wantFailure(t, "lost write on n2", got, "node keyspaces differ")
}

func TestSelfTestLostWriteFromHistoryFails(t *testing.T) {
	d := cleanRun(t)
	i := lastAckedPut(t, d.Records)
	w := d.Records[i]
	// Every node agrees, but an earlier acknowledged write is missing from the MVCC
	// history: its client was told revision w.Rev and the store never had it.
	for j := i - 1; j >= 0; j-- {
		r := d.Records[j]
		if r.Kind == OpPut && r.Outcome == OutcomeOK && r.Rev < w.Rev {
			delete(d.Timeline.Changes[r.Rev].Puts, r.Key)
			wantFailure(t, "lost write in the MVCC history", verdict(t, d), "acknowledged write lost")
			return
		}
	}
	t.Fatal("no earlier acknowledged put")
}

func TestSelfTestStaleReadFails(t *testing.T) {
	d := cleanRun(t)
	d.Records = append([]Record(nil), d.Records...)
	i, j := staleRead(d.Records)
	d.Records[i].GotValue, d.Records[i].ModRev = d.Records[j].Value, d.Records[j].Rev
	wantFailure(t, "stale read", verdict(t, d), "not linearizable")
}

func TestSelfTestExtraKeyFails(t *testing.T) {
	d := cleanRun(t)
	d.Nodes[2].KVs = append(append([]api.KV(nil), d.Nodes[2].KVs...),
		api.KV{Key: "k/zz", Value: []byte("nobody"), CreateRevision: 3, ModRevision: 3, Version: 1})
	got := verdict(t, d)
	wantFailure(t, "extra key on n3", got, "a key no client wrote")
	wantFailure(t, "extra key on n3", got, "node keyspaces differ")

	// The same key in the store's MVCC history, on every node.
	d = cleanRun(t)
	d.Timeline.Changes[d.Timeline.To].Puts["k/zz"] = "nobody"
	wantFailure(t, "extra key in the MVCC history", verdict(t, d), "which no client wrote")
}

func TestSelfTestDivergedNodeFails(t *testing.T) {
	d := cleanRun(t)
	kvs := append([]api.KV(nil), d.Nodes[0].KVs...)
	kvs[0].Version++ // same keys and values, different metadata
	d.Nodes[0].KVs = kvs
	wantFailure(t, "diverged n1", verdict(t, d), "node keyspaces differ")

	a, b := cleanRun(t).Timeline, cleanRun(t).Timeline
	if v := DiffTimelines("n1", a, "n2", b); len(v) != 0 {
		t.Fatalf("equal MVCC histories differ: %q", v)
	}
	b.Changes[b.To/2] = &RevChange{Puts: map[string]string{"k/0": "other"}}
	if v := DiffTimelines("n1", a, "n2", b); len(v) != 1 {
		t.Fatalf("MVCC histories that differ at %d: %q, want one difference", b.To/2, v)
	}
}

func TestSelfTestNoNodesFails(t *testing.T) {
	d := cleanRun(t)
	d.Nodes = nil
	wantFailure(t, "no node states", verdict(t, d), "no node's final state")
}

// TestCheckFloors: runs that would pass every rule because they did nothing fail.
func TestCheckFloors(t *testing.T) {
	d := cleanRun(t)
	finalRead := Record{Client: FinalClient, Kind: OpGet, Key: "k/0", Call: 5, Return: 6, Outcome: OutcomeOK}
	failedPut := Record{Client: 1, Kind: OpPut, Key: "k/0", Value: "v", Call: 1, Return: 2, Outcome: OutcomeFailed}
	for _, tc := range []struct {
		name    string
		records []Record
		events  []FaultEvent
		want    []string
	}{
		{"empty history", nil, d.Events, []string{"0 acknowledged writes", "0 successful linearizable reads", "0 operations overlap"}},
		{"one failed put and a final read", []Record{failedPut, finalRead}, d.Events, []string{"0 acknowledged writes"}},
		{"no fault injected", d.Records, nil, []string{"was never injected"}},
		{"fault failed", d.Records, []FaultEvent{{Step: d.Schedule.Steps[0], Err: "chaos: node not running"}},
			[]string{"was never injected", "node not running"}},
		{"fault not healed", d.Records, []FaultEvent{{Start: d.Events[0].Start, End: d.Events[0].End, Step: d.Schedule.Steps[0], HealErr: "boom"}},
			[]string{"was not healed: boom"}},
	} {
		_, got := CheckFloors(tc.records, d.Specs, d.Schedule, tc.events, selfTestFloors)
		for _, w := range tc.want {
			wantFailure(t, tc.name, got, w)
		}
	}

	// Two specs, one never scheduled: the window was too short for it.
	specs := append(d.Specs, FaultSpec{Kind: FaultPause, Target: TargetRandom})
	_, got := CheckFloors(d.Records, specs, d.Schedule, d.Events, selfTestFloors)
	wantFailure(t, "unscheduled spec", got, "has no step in the schedule")
	if len(got) != 1 {
		t.Fatalf("unscheduled spec: failures %q, want exactly one", got)
	}

	counts, got := CheckFloors(d.Records, d.Specs, d.Schedule, d.Events, selfTestFloors)
	if len(got) != 0 {
		t.Fatalf("clean run below its floors: %q", got)
	}
	if counts.AckedWrites < selfTestFloors.AckedWrites || counts.LinearizableReads < selfTestFloors.LinearizableReads || counts.MinOpsPerFault < selfTestFloors.OpsPerFault {
		t.Fatalf("counts %+v below floors %+v but no failure", counts, selfTestFloors)
	}
}
