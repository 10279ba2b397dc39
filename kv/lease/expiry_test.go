package lease

import (
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// waitLeading waits until the running lessor has taken over the store's term.
func waitLeading(t *testing.T, st *lessorStore, l *Lessor) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !l.leading(st.Status().Term) {
		if time.Now().After(deadline) {
			t.Fatal("the lessor never took over")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGone waits, up to limit, for lease id to be revoked and returns when it was seen
// gone (false if it never was).
func waitGone(st *lessorStore, id int64, limit time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, ok := st.FSM().View().Lease(id); !ok {
			return time.Now(), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, false
}

// Leases granted while the leader sits (no takeover since) get a deadline and expire at
// it, with their keys; a short lease granted after a long one expires at its own
// deadline, not at the long one's. Every other test of the lessor moves leadership,
// which resets the deadlines and hides both.
//
//	t=0     lessor leads; grant 1 (TTL 60 s), then 2 (TTL 1 s) with key k
//	t≈1 s   2 expires, k deleted; 1 stays
func TestLessorExpiresUnderSittingLeader(t *testing.T) {
	st, l := newLessorFixture(t)
	l.Start()
	defer l.Stop()
	waitLeading(t, st, l)
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 1, LeaseTTL: 60_000})
	// Let a poll give the long lease its deadline before the short one is granted.
	time.Sleep(3 * lessorPoll)
	granted := time.Now()
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 2, LeaseTTL: fsm.MinLeaseTTL})
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte("k"), Lease: 2}}}})
	// Generous: the deadline is 1 s; 10 s only bounds a lessor that never expires it.
	gone, ok := waitGone(st, 2, 10*time.Second)
	if !ok {
		t.Fatalf("a 1 s lease granted under a sitting leader still exists after 10 s")
	}
	if early := time.Duration(fsm.MinLeaseTTL)*time.Millisecond - gone.Sub(granted); early > 0 {
		t.Fatalf("lease expired %v before its TTL", early)
	}
	if _, err := st.FSM().View().Get([]byte("k"), 0); err == nil {
		t.Error("key k survived its lease")
	}
	if _, ok := st.FSM().View().Lease(1); !ok {
		t.Error("the 60 s lease expired with the 1 s one")
	}
}
