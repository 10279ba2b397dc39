package chaos

import (
	"testing"
	"time"
)

// The fail-fast rules, on probes made up to hit each: only a prompt 503 NoLeader, or a
// prompt 504 Timeout for a write (an outcome unknown), passes.
func TestFailFastRules(t *testing.T) {
	fast, slow := 500*time.Millisecond, FailFastLimit+time.Millisecond
	for _, tc := range []struct {
		p    FailFastProbe
		pass bool
	}{
		{FailFastProbe{Op: "put", Took: fast, Reason: wantCutOff}, true},
		{FailFastProbe{Op: "get", Took: fast, Reason: wantCutOff}, true},
		{FailFastProbe{Op: "put", Took: fast, Reason: wantInFlight}, true},
		{FailFastProbe{Op: "get", Took: fast, Reason: wantInFlight}, false},
		{FailFastProbe{Op: "put", Took: slow, Reason: wantInFlight}, false},
		{FailFastProbe{Op: "put", Took: slow, Reason: wantCutOff}, false},
		{FailFastProbe{Op: "get", Took: fast, Reason: "ok"}, false},
		{FailFastProbe{Op: "put", Took: fast, Reason: "409 Conflict"}, false},
	} {
		r := &FaultRunner{logf: t.Logf}
		tc.p.Node = "n1"
		r.recordProbes("n1", []FailFastProbe{tc.p})
		if got := len(r.FailFastProblems()) == 0; got != tc.pass {
			t.Errorf("%s %q after %s: passed %t, want %t", tc.p.Op, tc.p.Reason, tc.p.Took, got, tc.pass)
		}
	}
}
