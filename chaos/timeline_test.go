package chaos

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"syscall"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

func TestDiffStates(t *testing.T) {
	// rev 1: put a=x   rev 2: put b=y   rev 3: delete a, put b=z (one txn)
	kv := func(k, v string, mod int64) api.KV { return api.KV{Key: k, Value: []byte(v), ModRevision: mod} }
	states := []map[string]api.KV{
		nil,
		{"a": kv("a", "x", 1)},
		{"a": kv("a", "x", 1), "b": kv("b", "y", 2)},
		{"b": kv("b", "z", 3)},
	}
	tl := DiffStates(states, 1, 3)
	want := map[int64]*RevChange{
		1: {Puts: map[string]string{"a": "x"}},
		2: {Puts: map[string]string{"b": "y"}},
		3: {Puts: map[string]string{"b": "z"}, Deletes: []string{"a"}},
	}
	if !reflect.DeepEqual(tl.Changes, want) || !tl.Complete() {
		t.Errorf("changes = %+v, want %+v", tl.Changes, want)
	}
	if tl := DiffStates(states, 2, 3); tl.Complete() || tl.Changes[2] != nil || tl.Changes[3] == nil {
		t.Errorf("compacted below 2: changes = %+v, want only revision 3", tl.Changes)
	}
}

func TestResolveUnknowns(t *testing.T) {
	tl := &Timeline{From: 1, To: 3, Changes: map[int64]*RevChange{
		1: {Puts: map[string]string{"k/a": "v1"}},
		2: {Puts: map[string]string{"k/a": "v2"}},
		3: {Puts: map[string]string{}, Deletes: []string{"k/a"}},
	}}
	h := []Record{
		put("k/a", "v1", 0, 10, 1),
		unknownPut("k/a", "v2", 20, 30), // in the history at 2
		unknownPut("k/a", "v3", 20, 30), // never applied
		rec(OpDelete, "k/a", 5, 8, func(r *Record) { r.Outcome = OutcomeUnknown }), // may be the unexplained delete at 3
		get("k/a", 40, 50, false, "", 0, 3),
	}
	for i := range h {
		h[i].ID = i
	}
	out, v := Resolve(h, tl, "k/")
	if len(v) != 0 {
		t.Fatalf("violations %q, want none", v)
	}
	if r := out[1]; r.Outcome != OutcomeOK || !r.Late || r.Rev != 2 {
		t.Errorf("unknown put of v2 resolved to %+v, want OK late at revision 2", r)
	}
	if out[2].Outcome != OutcomeFailed {
		t.Errorf("unknown put of v3 resolved to %s, want failed (never applied)", out[2].Outcome)
	}
	if out[3].Outcome != OutcomeUnknown {
		t.Errorf("unknown delete resolved to %s, want unknown (revision 3 is an unexplained delete)", out[3].Outcome)
	}
	if rep := Check(h, []string{"k/a"}, "k/", tl, 0); !rep.OK() {
		t.Errorf("check: %s %q", rep, rep.Violations)
	}
	h = append(h, put("k/a", "v9", 60, 70, 4)) // acknowledged at 4, not in the history
	if _, v := Resolve(h, tl, "k/"); len(v) != 0 {
		t.Errorf("revision 4 is past the timeline, violations %q", v)
	}
	h[0].Rev = 2 // acknowledged at revision 2, which holds v2
	if _, v := Resolve(h, tl, "k/"); len(v) != 1 {
		t.Errorf("violations %q, want one lost write", v)
	}
}

func TestClassify(t *testing.T) {
	dial := fmt.Errorf("client: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED})
	read := fmt.Errorf("client: %w", &net.OpError{Op: "read", Err: syscall.ECONNRESET})
	tests := []struct {
		err   error
		write bool
		want  Outcome
	}{
		{nil, true, OutcomeOK},
		{dial, true, OutcomeFailed},
		{read, true, OutcomeUnknown},
		{read, false, OutcomeFailed},
		{&api.Error{Code: 503, Reason: api.ReasonUnavailable}, true, OutcomeFailed},
		{&api.Error{Code: 503, Reason: api.ReasonNoLeader}, true, OutcomeFailed},
		{&api.Error{Code: 503, Reason: api.ReasonLeadershipLost}, true, OutcomeUnknown},
		{&api.Error{Code: 503, Reason: api.ReasonShuttingDown}, true, OutcomeUnknown},
		{&api.Error{Code: 504, Reason: api.ReasonTimeout}, true, OutcomeUnknown},
		{&api.Error{Code: 500, Reason: api.ReasonInternal}, true, OutcomeUnknown},
		{&api.Error{Code: 400, Reason: api.ReasonBadRequest}, true, OutcomeFailed},
		{errors.New("context deadline exceeded"), true, OutcomeUnknown},
	}
	for i, tt := range tests {
		if got := classify(tt.err, tt.write); got != tt.want {
			t.Errorf("#%d classify(%v, write=%t) = %s, want %s", i, tt.err, tt.write, got, tt.want)
		}
	}
}
