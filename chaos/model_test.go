package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// rec builds a finished record; times are in arbitrary units.
func rec(kind OpKind, key string, call, ret int64, f func(r *Record)) Record {
	r := Record{Kind: kind, Key: key, Call: call, Return: ret, Outcome: OutcomeOK, Node: "n1"}
	if f != nil {
		f(&r)
	}
	return r
}

func put(key, val string, call, ret, rev int64) Record {
	return rec(OpPut, key, call, ret, func(r *Record) { r.Value, r.Rev = val, rev })
}

func unknownPut(key, val string, call, ret int64) Record {
	return rec(OpPut, key, call, ret, func(r *Record) { r.Value, r.Outcome = val, OutcomeUnknown })
}

func get(key string, call, ret int64, found bool, val string, modRev, rev int64) Record {
	return rec(OpGet, key, call, ret, func(r *Record) {
		r.Found, r.GotValue, r.ModRev, r.Rev = found, val, modRev, rev
	})
}

func checkLin(t *testing.T, records []Record, keys ...string) porcupine.CheckResult {
	t.Helper()
	for i := range records {
		records[i].ID = i
	}
	res, _ := porcupine.CheckOperationsVerbose(KVModel.ToModel(), Operations(records, keys), 10*time.Second)
	return res
}

// Each history is drawn as client lanes over time; "|--|" is an operation interval.
func TestModelLinearizability(t *testing.T) {
	tests := []struct {
		name    string
		history []Record
		want    porcupine.CheckResult
	}{
		{
			// c0 |put a=v1 r2|  |put a=v2 r3|
			// c1                              |get a -> v2@3|
			name: "sequential put put get",
			history: []Record{
				put("a", "v1", 0, 10, 2), put("a", "v2", 20, 30, 3), get("a", 40, 50, true, "v2", 3, 3),
			},
			want: porcupine.Ok,
		},
		{
			// stale read: v2 was acknowledged before the get started, the get sees v1
			name: "stale read",
			history: []Record{
				put("a", "v1", 0, 10, 2), put("a", "v2", 20, 30, 3), get("a", 40, 50, true, "v1", 2, 3),
			},
			want: porcupine.Illegal,
		},
		{
			// lost write: the put was acknowledged, a later read finds nothing
			name: "acknowledged write lost",
			history: []Record{
				put("a", "v1", 0, 10, 2), get("a", 20, 30, false, "", 0, 2),
			},
			want: porcupine.Illegal,
		},
		{
			// c0 |put a=v1 r2|
			// c1    |------get a -> absent------|   (concurrent: may linearize first)
			name: "concurrent read may miss",
			history: []Record{
				put("a", "v1", 10, 20, 2), get("a", 0, 30, false, "", 0, 1),
			},
			want: porcupine.Ok,
		},
		{
			// an unknown put, observed later with its revision: fine
			name: "unknown put observed",
			history: []Record{
				put("a", "v1", 0, 10, 2), unknownPut("a", "v2", 20, 30),
				get("a", 40, 50, true, "v2", 7, 7), get("a", 60, 70, true, "v2", 7, 8),
			},
			want: porcupine.Ok,
		},
		{
			// an unknown put that never happened: fine
			name: "unknown put never applied",
			history: []Record{
				put("a", "v1", 0, 10, 2), unknownPut("a", "v2", 20, 30), get("a", 40, 50, true, "v1", 2, 5),
			},
			want: porcupine.Ok,
		},
		{
			// an unknown put observed with two different revisions: impossible
			name: "unknown put flips revision",
			history: []Record{
				unknownPut("a", "v2", 20, 30), get("a", 40, 50, true, "v2", 7, 7), get("a", 60, 70, true, "v2", 8, 8),
			},
			want: porcupine.Illegal,
		},
		{
			name: "revision goes backwards",
			history: []Record{
				put("a", "v1", 0, 10, 5), put("a", "v2", 20, 30, 4),
			},
			want: porcupine.Illegal,
		},
		{
			// CAS on the right revision reported as a conflict
			name: "cas false conflict",
			history: []Record{
				put("a", "v1", 0, 10, 2),
				rec(OpCAS, "a", 20, 30, func(r *Record) { r.Value, r.PrevRev, r.Succeeded = "v2", 2, false }),
			},
			want: porcupine.Illegal,
		},
		{
			name: "cas succeeds then read",
			history: []Record{
				put("a", "v1", 0, 10, 2),
				rec(OpCAS, "a", 20, 30, func(r *Record) { r.Value, r.PrevRev, r.Succeeded, r.Rev = "v2", 2, true, 3 }),
				rec(OpCAS, "a", 40, 50, func(r *Record) { r.Value, r.PrevRev, r.Succeeded = "v3", 2, false }),
				get("a", 60, 70, true, "v2", 3, 3),
			},
			want: porcupine.Ok,
		},
		{
			name: "delete of absent key reports a deletion",
			history: []Record{
				rec(OpDelete, "a", 0, 10, func(r *Record) { r.Deleted, r.Rev = 1, 2 }),
			},
			want: porcupine.Illegal,
		},
		{
			// txn: compare a@2, put a=v2 and b=w2 at revision 3; both visible after
			name: "txn writes both keys",
			history: []Record{
				put("a", "v1", 0, 10, 2),
				rec(OpTxn, "a", 20, 30, func(r *Record) {
					r.Key2, r.Value, r.Value2, r.PrevRev, r.Succeeded, r.Rev = "b", "v2", "w2", 2, true, 3
				}),
				get("a", 40, 50, true, "v2", 3, 3), get("b", 40, 50, true, "w2", 3, 3),
			},
			want: porcupine.Ok,
		},
		{
			// txn reported failed but its second key's write is visible
			name: "failed txn leaks a write",
			history: []Record{
				put("a", "v1", 0, 10, 2),
				rec(OpTxn, "a", 20, 30, func(r *Record) {
					r.Key2, r.Value, r.Value2, r.PrevRev, r.Succeeded = "b", "v2", "w2", 1, false
					r.Found, r.GotValue, r.ModRev, r.Rev = true, "v1", 2, 2
				}),
				get("b", 40, 50, true, "w2", 3, 3),
			},
			want: porcupine.Illegal,
		},
		{
			// a scan after an acknowledged put misses the key
			name: "stale scan",
			history: []Record{
				put("k/1", "v1", 0, 10, 2),
				rec(OpScan, "", 20, 30, func(r *Record) { r.Prefix, r.Rev = "k/", 2 }),
			},
			want: porcupine.Illegal,
		},
		{
			name: "scan sees the put",
			history: []Record{
				put("k/1", "v1", 0, 10, 2),
				rec(OpScan, "", 20, 30, func(r *Record) {
					r.Prefix, r.Rev, r.Items = "k/", 2, []ScanItem{{Key: "k/1", Value: "v1", ModRev: 2}}
				}),
			},
			want: porcupine.Ok,
		},
	}
	for i, tt := range tests {
		if got := checkLin(t, tt.history, "k/1", "k/2", "a", "b"); got != tt.want {
			t.Errorf("#%d %s: result = %s, want %s", i, tt.name, got, tt.want)
		}
	}
}

func TestCheckSerializable(t *testing.T) {
	serial := func(key string, call, ret int64, val string, modRev, rev int64, node string, inc int) Record {
		return rec(OpGetSerial, key, call, ret, func(r *Record) {
			r.Found, r.GotValue, r.ModRev, r.Rev, r.Node, r.Incarnation = true, val, modRev, rev, node, inc
		})
	}
	tests := []struct {
		name    string
		history []Record
		want    string // substring of the first violation, "" = none
	}{
		{"stale but consistent", []Record{put("a", "v1", 0, 10, 2), put("a", "v2", 20, 30, 3), serial("a", 40, 50, "v1", 2, 2, "n2", 0)}, ""},
		{"never written", []Record{serial("a", 40, 50, "zz", 2, 2, "n2", 0)}, "no client wrote"},
		{"wrong revision", []Record{put("a", "v1", 0, 10, 2), serial("a", 40, 50, "v1", 4, 4, "n2", 0)}, "acknowledged at revision 2"},
		{"inconsistent snapshot", []Record{put("a", "v1", 0, 10, 2), put("a", "v2", 20, 30, 3), serial("a", 40, 50, "v1", 2, 3, "n2", 0)}, "missing write"},
		{"back in time", []Record{put("a", "v1", 0, 10, 2), put("b", "w", 12, 14, 3),
			serial("a", 20, 30, "v1", 2, 3, "n2", 0), serial("a", 40, 50, "v1", 2, 2, "n2", 0)}, "went back in time"},
		{"restart may go back", []Record{put("a", "v1", 0, 10, 2), put("b", "w", 12, 14, 3),
			serial("a", 20, 30, "v1", 2, 3, "n2", 0), serial("a", 40, 50, "v1", 2, 2, "n2", 1)}, ""},
	}
	for i, tt := range tests {
		for j := range tt.history {
			tt.history[j].ID = j
		}
		v := CheckSerializable(tt.history)
		switch {
		case tt.want == "" && len(v) > 0:
			t.Errorf("#%d %s: violations %q, want none", i, tt.name, v)
		case tt.want != "" && (len(v) == 0 || !strings.Contains(v[0], tt.want)):
			t.Errorf("#%d %s: violations %q, want one containing %q", i, tt.name, v, tt.want)
		}
	}
}

func TestCheckDurabilityAndScans(t *testing.T) {
	final := func(key string, found bool, val string, modRev int64) Record {
		return rec(OpGet, key, 100, 110, func(r *Record) {
			r.Client, r.Found, r.GotValue, r.ModRev, r.Rev = FinalClient, found, val, modRev, 9
		})
	}
	h := []Record{put("a", "v1", 0, 10, 2), put("b", "w1", 0, 10, 3), put("c", "x1", 0, 10, 4),
		final("a", true, "v1", 2), final("b", false, "", 0), final("c", true, "x9", 8)}
	for i := range h {
		h[i].ID = i
	}
	v := CheckDurability(h)
	if len(v) != 1 || !strings.Contains(v[0], "acknowledged write lost") || !strings.Contains(v[0], " b ") {
		t.Errorf("durability violations = %q, want exactly one about b", v)
	}
	rep := Check(h, []string{"a", "b", "c"}, "", nil, 5*time.Second)
	if rep.OK() {
		t.Errorf("Check of a history with a lost write passed: %s", rep)
	}

	scan := rec(OpScan, "", 0, 10, func(r *Record) {
		r.Prefix, r.Limit, r.Rev = "k/", 2, 5
		r.PageRevs, r.PageSizes = []int64{5, 6}, []int{3, 0}
		r.Items = []ScanItem{{Key: "k/2"}, {Key: "k/1"}, {Key: "x"}}
	})
	v = CheckScans([]Record{scan})
	if len(v) != 4 {
		t.Errorf("scan violations = %d %q, want 4 (revision, limit, order, prefix)", len(v), v)
	}
}

func TestCheckCleanHistory(t *testing.T) {
	h := NewHistory()
	h.Add(put("a", "v1", 0, 10, 2))
	h.Add(unknownPut("a", "v2", 20, 30))
	h.Add(get("a", 40, 50, true, "v2", 3, 3))
	r := get("a", 60, 70, true, "v2", 3, 3)
	r.Client = FinalClient
	h.Add(r)
	rep := Check(h.Records(), []string{"a"}, "", nil, 5*time.Second)
	if !rep.OK() || rep.Unknown != 1 || rep.KeyOps != 4 {
		t.Fatalf("report = %s %q, want OK with 1 unknown and 4 key ops", rep, rep.Violations)
	}
	path := t.TempDir() + "/viz.html"
	if err := rep.WriteVisualization(path); err != nil {
		t.Fatal(err)
	}
}

// TestModelUnknownWriteFloor: a write whose revision nobody saw still comes after the
// last write somebody saw, so reading it back at or below that revision is impossible,
// as is a guard that names such a revision; above it both are fine. Found by the
// checker mutation run (issue 23): the model forgot the bound.
func TestModelUnknownWriteFloor(t *testing.T) {
	// After put a@7 (or a delete at 7), an unknown put of b:
	for _, before := range []keyState{{Exists: true, Value: "a", ModRev: 7}, {Floor: 7}} {
		next := stepKey(before, KeyInput{Key: "k", Success: ActPut, Value: "b"}, KeyOutput{Unknown: true})
		var s keyState
		for _, x := range next {
			if x.(keyState).Value == "b" {
				s = x.(keyState)
			}
		}
		if s.Value != "b" || s.ModRev != revUnknown || s.Floor != 7 {
			t.Fatalf("after %+v and an unknown put: states %v, want b @? after 7", before, next)
		}
		get := KeyInput{Key: "k", Success: ActGet}
		cas := KeyInput{Key: "k", Cond: &Cond{Target: CondModRevision}, Success: ActPut, Value: "c"}
		for i, tc := range []struct {
			in  KeyInput
			rev int64 // read mod revision, or the guard's revision
			ok  bool
		}{{get, 6, false}, {get, 7, false}, {get, 8, true}, {cas, 7, false}, {cas, 8, true}} {
			out := KeyOutput{Succeeded: true, Rev: 20, Found: true, Value: "b", ModRev: tc.rev}
			if tc.in.Cond != nil {
				c := *tc.in.Cond
				c.Int = tc.rev
				tc.in.Cond = &c
				out = KeyOutput{Succeeded: true, Rev: 20}
			}
			if got := len(stepKey(s, tc.in, out)) > 0; got != tc.ok {
				t.Errorf("#%d after %+v: possible = %v, want %v", i, before, got, tc.ok)
			}
		}
	}
}
