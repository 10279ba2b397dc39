package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/keel-kv/keel/kv/api"
)

// One self-test per rule of the checker (CheckRun and what it calls). Each row breaks
// exactly one rule in a small synthetic run and wants the message of that rule; the
// clean run passes every rule. The rules:
//
// Check (the history):
//   - lin:    porcupine over KVModel — a read returns the last write's value and mod
//     revision, write revisions grow, a guard holds iff the answer says so, a delete
//     says whether the key existed (model_test.go has one history per model rule);
//   - lin-unknown-txn: an unknown txn seen applied on one key is applied on both, at
//     the revision seen (all or nothing);
//   - timeout: a porcupine check that timed out is not OK;
//   - unexpected: a 500, a 4xx other than 404/409, or a malformed answer fails the run
//     (classify/unexpected decide which errors are recorded as such);
//   - serial-*: a serializable read returns a value some client wrote, not before its
//     write was invoked, at the revision that write was acknowledged at, no later than
//     the read's revision, with no acknowledged write to the key in between, and one
//     node process never goes back in time (a restart may);
//   - scan-*: every page at the first page's revision, no page over the limit, keys
//     under the prefix and strictly ascending;
//   - durable: the verifier's final read shows the last acknowledged write or a later
//     one (an unknown delete that did not happen does not excuse an absent key).
//
// Resolve (the history against the store's MVCC history):
//   - acked-*: every acknowledged put, CAS, txn (both keys) and delete is in it;
//   - phantom: every value in it under the prefix was written by a client;
//   - partial-txn: an unknown txn is in it on both keys at one revision or on neither;
//   - late: an unknown write found in it took effect by the time a revision >= its own
//     was reported; one not in a complete history never took effect; an unknown delete
//     the history shows no unexplained deletion for never took effect.
//
// CheckNodes (every node's final keyspace):
//   - nodes-none: some node's state was read;
//   - node-key, node-value, node-other-key, node-rev, node-future: each key and value
//     was written by a client, to that key, at the acknowledged revision, not after
//     the node's revision;
//   - node-lost: the last acknowledged write of each key is there (an absent key is
//     lost, unless the last write was a delete);
//   - node-history: the keyspace equals the MVCC history's at the node's revision (no
//     key absent, none extra);
//   - nodes-differ: all nodes hold the same keyspace at the same revision.
//
// CheckWatches: each segment receives exactly the history's events (gap, duplicate,
// order, phantom, beyond the end), catches up, does not end for good; an MVCC history
// was read. More in watch_test.go (floors, compacted restarts).
//
// Covered elsewhere, one test per rule: the floors (TestCheckFloors), leases and locks
// (TestSelfTestLeases), fail-fast probes (TestFailFastRules), DiffTimelines
// (TestSelfTestDivergedNodeFails).

// ruleRun is a clean run of two keys on three nodes, times in arbitrary units:
//
//	#0  c1 put k/a=a1                 [0,10]    rev 1
//	#1  c1 put k/b=b1                 [20,30]   rev 2
//	#2  c1 txn a@1: a=a2, b=b2        [40,50]   rev 3
//	#3  c1 cas a@3: a=a3              [60,70]   rev 4
//	#4  c1 get k/a -> a3@4            [80,90]   rev 4
//	#5  c2 get-serial k/b -> b2@3     [80,90]   rev 4 (n2)
//	#6  c1 delete k/b -> 1            [100,110] rev 5
//	#7  c1 scan k/ limit 2 -> a3@4    [120,130] rev 5
//	#8  c1 put k/b=b3 unknown         [140,150]        (rev 6 in the MVCC history)
//	#9  c1 txn a@4: a=a4, b=b4 unknown [160,170]       (never applied)
//	#10 final get k/a -> a3@4         [200,210] rev 6
//	#11 final get k/b -> b3@6         [200,210] rev 6
func ruleRun() RunData {
	r := func(kind OpKind, key string, call, ret int64, f func(r *Record)) Record {
		x := rec(kind, key, call, ret, f)
		x.Client = 1
		return x
	}
	records := []Record{
		put("k/a", "a1", 0, 10, 1),
		put("k/b", "b1", 20, 30, 2),
		r(OpTxn, "k/a", 40, 50, func(r *Record) {
			r.Key2, r.Value, r.Value2, r.PrevRev, r.Succeeded, r.Rev = "k/b", "a2", "b2", 1, true, 3
		}),
		r(OpCAS, "k/a", 60, 70, func(r *Record) { r.Value, r.PrevRev, r.Succeeded, r.Rev = "a3", 3, true, 4 }),
		get("k/a", 80, 90, true, "a3", 4, 4),
		rec(OpGetSerial, "k/b", 80, 90, func(r *Record) {
			r.Client, r.Node, r.Found, r.GotValue, r.ModRev, r.Rev = 2, "n2", true, "b2", 3, 4
		}),
		r(OpDelete, "k/b", 100, 110, func(r *Record) { r.Deleted, r.Rev = 1, 5 }),
		r(OpScan, "", 120, 130, func(r *Record) {
			r.Prefix, r.Limit, r.Rev = "k/", 2, 5
			r.Items, r.PageRevs, r.PageSizes = []ScanItem{{Key: "k/a", Value: "a3", ModRev: 4}}, []int64{5}, []int{1}
		}),
		unknownPut("k/b", "b3", 140, 150),
		r(OpTxn, "k/a", 160, 170, func(r *Record) {
			r.Key2, r.Value, r.Value2, r.PrevRev, r.Outcome = "k/b", "a4", "b4", 4, OutcomeUnknown
		}),
		finalGet("k/a", 200, 210, "a3", 4, 6),
		finalGet("k/b", 200, 210, "b3", 6, 6),
	}
	tl := &Timeline{From: 1, To: 6, Changes: map[int64]*RevChange{
		1: {Puts: map[string]string{"k/a": "a1"}},
		2: {Puts: map[string]string{"k/b": "b1"}},
		3: {Puts: map[string]string{"k/a": "a2", "k/b": "b2"}},
		4: {Puts: map[string]string{"k/a": "a3"}},
		5: {Puts: map[string]string{}, Deletes: []string{"k/b"}},
		6: {Puts: map[string]string{"k/b": "b3"}},
	}}
	d := RunData{Records: records, Keys: []string{"k/a", "k/b"}, Prefix: "k/", Timeline: tl}
	for _, id := range []string{"n1", "n2", "n3"} {
		d.Nodes = append(d.Nodes, NodeState{Node: id, Revision: tl.To, KVs: tl.Keyspace(tl.To)})
	}
	d.Watches = []WatchLog{faithfulWatch(0, tl, 1)}
	return d
}

func finalGet(key string, call, ret int64, val string, modRev, rev int64) Record {
	r := get(key, call, ret, val != "", val, modRev, rev)
	r.Client = FinalClient
	return r
}

// ruleVerdict is every failure CheckRun finds in d, with no floors.
func ruleVerdict(d RunData) []string {
	for i := range d.Records {
		d.Records[i].ID = i
	}
	rep, _, problems := CheckRun(d, Floors{}, 10*time.Second)
	out := append(append([]string(nil), problems...), rep.Violations...)
	if !rep.OK() && len(rep.Violations) == 0 {
		out = append(out, "report not OK: "+rep.String())
	}
	return out
}

// setKV replaces (or adds) key's entry in node i's keyspace.
func setKV(d *RunData, i int, kv api.KV) {
	kvs := append([]api.KV(nil), d.Nodes[i].KVs...)
	for j := range kvs {
		if kvs[j].Key == kv.Key {
			kvs[j] = kv
			d.Nodes[i].KVs = kvs
			return
		}
	}
	d.Nodes[i].KVs = append(kvs, kv)
}

func dropKV(d *RunData, i int, key string) {
	var kvs []api.KV
	for _, kv := range d.Nodes[i].KVs {
		if kv.Key != key {
			kvs = append(kvs, kv)
		}
	}
	d.Nodes[i].KVs = kvs
}

func watchEvents(d *RunData) *[]WatchedEvent { return &d.Watches[0].Segments[0].Events }

// ruleCase breaks one rule of ruleRun (want: a substring of its message; "" = the
// run must still pass).
type ruleCase struct {
	rule, want string
	breakIt    func(d *RunData)
}

var historyRules = []ruleCase{
	{"lin", "not linearizable", func(d *RunData) { d.Records[4].GotValue, d.Records[4].ModRev = "a2", 3 }},
	// The unknown txn #9 is seen applied on k/a at revision 7; then k/b cannot be absent.
	{"lin-unknown-txn", "not linearizable", func(d *RunData) {
		d.Timeline = nil
		d.Watches = nil
		d.Records = append(d.Records, get("k/a", 180, 190, true, "a4", 7, 7))
		d.Records[10].GotValue, d.Records[10].ModRev, d.Records[10].Rev = "a4", 7, 7
		d.Records[11].Found, d.Records[11].GotValue, d.Records[11].ModRev, d.Records[11].Rev = false, "", 0, 7
	}},
	// The unknown put #8 follows the delete #6 at revision 5: it cannot be read back at
	// revision 5 or before (a write whose revision nobody saw is still after the last
	// one somebody saw).
	{"lin-unknown-floor", "not linearizable", func(d *RunData) {
		d.Timeline = nil
		d.Watches = nil
		d.Records[11].ModRev = 5
	}},
	{"unexpected", "unexpected error: 500 internal", func(d *RunData) {
		d.Records = append(d.Records, rec(OpGet, "k/a", 180, 190, func(r *Record) {
			r.Outcome, r.Err, r.Unexpected = OutcomeFailed, "500 internal", true
		}))
	}},
	{"serial-never-written", `get-serial of k/b on n2 returned "zz", which no client wrote`, func(d *RunData) {
		d.Records[5].GotValue = "zz"
	}},
	{"serial-before-write", `returned "b3" before its write #8 was invoked`, func(d *RunData) {
		d.Records[5].GotValue, d.Records[5].ModRev, d.Records[5].Rev = "b3", 6, 6
	}},
	{"serial-ack-rev", "but write #2 was acknowledged at revision 3", func(d *RunData) { d.Records[5].ModRev = 2 }},
	{"serial-future", "mod revision 3 is after the read revision 2", func(d *RunData) { d.Records[5].Rev = 2 }},
	{"serial-missing-write", "missing write #2 at revision 3", func(d *RunData) {
		d.Records[5].GotValue, d.Records[5].ModRev = "b1", 2
	}},
	{"serial-back-in-time", "went back in time", func(d *RunData) {
		d.Records = append(d.Records, rec(OpGetSerial, "k/a", 95, 98, func(r *Record) {
			r.Client, r.Node, r.Found, r.GotValue, r.ModRev, r.Rev = 2, "n2", true, "a2", 3, 3
		}))
	}},
	{"serial-restart-may-go-back", "", func(d *RunData) {
		d.Records = append(d.Records, rec(OpGetSerial, "k/a", 95, 98, func(r *Record) {
			r.Client, r.Node, r.Incarnation, r.Found, r.GotValue, r.ModRev, r.Rev = 2, "n2", 1, true, "a2", 3, 3
		}))
	}},
	{"scan-revision", "page 1 served at revision 6", func(d *RunData) {
		d.Records[7].PageRevs, d.Records[7].PageSizes = []int64{5, 6}, []int{1, 0}
	}},
	{"scan-limit", "holds 3 items, limit 2", func(d *RunData) { d.Records[7].PageSizes = []int{3} }},
	{"scan-prefix", `returned key "x/1" outside the prefix`, func(d *RunData) {
		d.Records[7].Items = append(d.Records[7].Items, ScanItem{Key: "x/1", Value: "a1", ModRev: 1})
	}},
	{"scan-order", "(not strictly ascending)", func(d *RunData) {
		d.Records[7].Items = append(d.Records[7].Items, d.Records[7].Items[0])
	}},
	{"durable", "final read #10 on n1 shows \"a2\" @3", func(d *RunData) {
		d.Records[10].GotValue, d.Records[10].ModRev = "a2", 3
	}},
	// No unexplained delete of k/a in the history: the unknown delete did not happen.
	{"durable-unknown-delete", "final read #10 on n1 shows absent", func(d *RunData) {
		d.Records = append(d.Records, rec(OpDelete, "k/a", 175, 178, func(r *Record) { r.Outcome = OutcomeUnknown }))
		d.Records[10].Found, d.Records[10].GotValue, d.Records[10].ModRev = false, "", 0
	}},
}

var resolveRules = []ruleCase{
	{"acked-put", `cas "a3" to k/a (revision 4) is not in the MVCC history`, func(d *RunData) {
		delete(d.Timeline.Changes[4].Puts, "k/a")
	}},
	{"acked-txn", `txn "b2" to k/b (revision 3) is not in the MVCC history`, func(d *RunData) {
		delete(d.Timeline.Changes[3].Puts, "k/b")
	}},
	{"acked-delete", "delete of k/b (revision 5) is not in the MVCC history", func(d *RunData) {
		d.Timeline.Changes[5].Deletes = nil
	}},
	{"phantom", `MVCC history has k/c="zz" at revision 6, which no client wrote`, func(d *RunData) {
		d.Timeline.Changes[6].Puts["k/c"] = "zz"
	}},
	{"partial-txn", "txn #9 applied partially", func(d *RunData) {
		d.Timeline.Changes[7], d.Timeline.To = &RevChange{Puts: map[string]string{"k/a": "a4"}}, 7
	}},
	// The unknown put #8 is at revision 6, reported by #10 at 210: k/b is b3 from then.
	{"late-applied", "not linearizable", func(d *RunData) {
		d.Records[11] = get("k/b", 220, 230, false, "", 0, 6)
	}},
	// c1 is in no MVCC history, so its unknown put never happened and cannot be read.
	{"late-never-applied", "not linearizable", func(d *RunData) {
		d.Keys = append(d.Keys, "k/c")
		d.Records = append(d.Records, unknownPut("k/c", "c1", 180, 185), get("k/c", 190, 195, true, "c1", 7, 7))
	}},
}

var nodeRules = []ruleCase{
	{"nodes-none", "no node's final state", func(d *RunData) { d.Nodes = nil }},
	{"node-key", "node n3 holds key k/zz=\"a1\" @1, a key no client wrote", func(d *RunData) {
		setKV(d, 2, api.KV{Key: "k/zz", Value: []byte("a1"), CreateRevision: 1, ModRevision: 1, Version: 1})
	}},
	{"node-value", `node n1 holds k/a="zz" @4, a value no client wrote`, func(d *RunData) {
		setKV(d, 0, api.KV{Key: "k/a", Value: []byte("zz"), CreateRevision: 1, ModRevision: 4, Version: 3})
	}},
	{"node-other-key", `node n1 holds k/a="b1", a value #1 wrote to k/b`, func(d *RunData) {
		setKV(d, 0, api.KV{Key: "k/a", Value: []byte("b1"), CreateRevision: 1, ModRevision: 4, Version: 3})
	}},
	{"node-rev", "but write #3 was acknowledged at revision 4", func(d *RunData) {
		setKV(d, 0, api.KV{Key: "k/a", Value: []byte("a3"), CreateRevision: 1, ModRevision: 5, Version: 3})
	}},
	{"node-future", "after the revision 5 it was read at", func(d *RunData) { d.Nodes[0].Revision = 5 }},
	{"node-lost", "node n2: acknowledged write lost: #3 put \"a3\" of k/a at revision 4; the node's state at revision 6 shows absent",
		func(d *RunData) { dropKV(d, 1, "k/a") }},
	{"node-history-absent", "(the MVCC history's last write to it); the node shows absent", func(d *RunData) {
		dropKV(d, 1, "k/a")
	}},
	// Keys outside the prefix are no client's: only the MVCC history speaks for them.
	{"node-history-other", `node n3: sys/x is absent, the MVCC history's last write to it is "s" @6`, func(d *RunData) {
		d.Timeline.Changes[6].Puts["sys/x"] = "s"
		for i := range 2 {
			setKV(d, i, api.KV{Key: "sys/x", Value: []byte("s"), CreateRevision: 6, ModRevision: 6, Version: 1})
		}
	}},
	{"node-history-extra", "node n3 holds sys/y=\"s\" @6, deleted or never written in the MVCC history", func(d *RunData) {
		setKV(d, 2, api.KV{Key: "sys/y", Value: []byte("s"), CreateRevision: 6, ModRevision: 6, Version: 1})
	}},
	{"nodes-differ", "node keyspaces differ", func(d *RunData) {
		kv := d.Nodes[2].KVs[0]
		kv.Version++
		setKV(d, 2, kv)
	}},
}

var watchRules = []ruleCase{
	{"watch-gap", "gap: event #1", func(d *RunData) {
		e := watchEvents(d)
		*e = append(append([]WatchedEvent(nil), (*e)[:1]...), (*e)[2:]...)
	}},
	{"watch-duplicate", "duplicate: event #2", func(d *RunData) {
		e := watchEvents(d)
		*e = append(append(append([]WatchedEvent(nil), (*e)[:2]...), (*e)[1]), (*e)[2:]...)
	}},
	{"watch-order", "out of order: event #2", func(d *RunData) {
		e := append([]WatchedEvent(nil), *watchEvents(d)...)
		e[1], e[2] = e[2], e[1]
		*watchEvents(d) = e
	}},
	{"watch-phantom", "is not in the history", func(d *RunData) { (*watchEvents(d))[0].Value = "zz" }},
	{"watch-beyond", "after the end of the history (6)", func(d *RunData) {
		*watchEvents(d) = append(*watchEvents(d), WatchedEvent{Rev: 7, Type: api.EventPut, Key: "k/a", Value: "a4"})
	}},
	{"watch-behind", "not caught up after healing", func(d *RunData) { d.Watches[0].Segments[0].Through = 5 }},
	{"watch-ended", "watcher 0: watch ended: 400", func(d *RunData) { d.Watches[0].Err = "watch ended: 400" }},
	{"watch-no-history", "no MVCC history was read", func(d *RunData) { d.Timeline = nil }},
}

func TestCheckerRules(t *testing.T) {
	if got := ruleVerdict(ruleRun()); len(got) != 0 {
		t.Fatalf("the clean run failed: %q", got)
	}
	for _, set := range [][]ruleCase{historyRules, resolveRules, nodeRules, watchRules} {
		for _, tc := range set {
			t.Run(tc.rule, func(t *testing.T) {
				d := ruleRun()
				tc.breakIt(&d)
				got := ruleVerdict(d)
				if tc.want == "" {
					if len(got) != 0 {
						t.Fatalf("want a pass, got %q", got)
					}
					return
				}
				wantFailure(t, tc.rule, got, tc.want)
			})
		}
	}
}

// TestCheckerRuleTimeout: a linearizability check that timed out proves nothing.
func TestCheckerRuleTimeout(t *testing.T) {
	if (Report{Linearizable: porcupine.Unknown}).OK() {
		t.Fatal("a report whose linearizability check timed out is OK")
	}
	if !(Report{Linearizable: porcupine.Ok}).OK() {
		t.Fatal("a linearizable report without violations is not OK")
	}
}

// TestCheckerRuleUnexpected: which errors the workload records as unexpected (and so
// fail the run, see the "unexpected" row of TestCheckerRules).
func TestCheckerRuleUnexpected(t *testing.T) {
	for i, tc := range []struct {
		err  error
		want bool
	}{
		{&api.Error{Code: 500, Reason: api.ReasonInternal}, true},
		{&api.Error{Code: 400, Reason: api.ReasonBadRequest}, true},
		{&api.Error{Code: 403, Reason: "Forbidden"}, true},
		{&api.Error{Code: 413, Reason: "TooLarge"}, true},
		{errBadAnswer, true},
		{&api.Error{Code: 404, Reason: "NotFound"}, false},
		{&api.Error{Code: 409, Reason: "Conflict"}, false},
		{&api.Error{Code: 503, Reason: api.ReasonNoLeader}, false},
		{&api.Error{Code: 504, Reason: api.ReasonTimeout}, false},
	} {
		if got := unexpected(tc.err); got != tc.want {
			t.Errorf("#%d unexpected(%v) = %t, want %t", i, tc.err, got, tc.want)
		}
	}
}
