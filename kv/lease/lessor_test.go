package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/raft"
)

// lessorStore is a store that leads and serves leader calls itself.
type lessorStore = kvtest.LeadingStore

func newLessorFixture(t *testing.T) (*lessorStore, *Lessor) {
	t.Helper()
	st := kvtest.NewLeading()
	l := New(st, hclog.NewNullLogger())
	st.SetLeaderHandler(l.HandleLeaderCall)
	return st, l
}

func mustApplyCmd(t *testing.T, s *lessorStore, cmd *fsm.Command) *fsm.Result {
	t.Helper()
	res, err := s.Apply(context.Background(), cmd)
	if err != nil || res.Err != nil {
		t.Fatalf("apply %+v: %v %v", cmd, err, res)
	}
	return res
}

// A new leader starts a lease's deadline from its checkpointed remaining time, counted
// from when this node saw the checkpoint — never from the full TTL — and expires it
// then, deleting its keys at one revision; not a moment before.
func TestLessorTakeOverStartsFromCheckpoint(t *testing.T) {
	st, l := newLessorFixture(t)
	ctx := context.Background()
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 10000})
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte("a"), Lease: 7}, {Type: fsm.OpPut, Key: []byte("b"), Lease: 7}}}})
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseCheckpoint, Checkpoints: []fsm.LeaseCheckpoint{{ID: 7, Remaining: 2000}}})
	// This node (a follower then) saw the checkpoint 1.5 s ago.
	seen := time.Now().Add(-1500 * time.Millisecond)
	l.observe(st.FSM().View(), seen)
	if !l.takeOver(ctx, 1) {
		t.Fatal("takeOver failed")
	}
	if d := l.mu.deadlines[7]; !d.Equal(seen.Add(2 * time.Second)) {
		t.Fatalf("deadline = seen + %v, want seen + 2s (not the full TTL)", d.Sub(seen))
	}
	l.expire(ctx) // 0.5 s left: not yet
	if _, ok := st.FSM().View().Lease(7); !ok {
		t.Fatal("lease expired before its deadline")
	}
	time.Sleep(time.Until(seen.Add(2 * time.Second)))
	rev := st.FSM().View().Revision()
	l.expire(ctx)
	v := st.FSM().View()
	if _, ok := v.Lease(7); ok {
		t.Fatal("lease not expired at its deadline")
	}
	if v.Revision() != rev+1 {
		t.Fatalf("expiry wrote revisions %d..%d, want one", rev+1, v.Revision())
	}
	for _, k := range []string{"a", "b"} {
		if _, err := v.Get([]byte(k), 0); err == nil {
			t.Fatalf("key %s survived its lease", k)
		}
	}
}

// Keepalives: the first one after a takeover writes one renewal entry and promises the
// full TTL; the next, while that promise is more than TTL/2 away, writes nothing and
// promises what is replicated. The periodic checkpoint carries the moved deadline.
func TestLessorKeepAlive(t *testing.T) {
	st, l := newLessorFixture(t)
	ctx := context.Background()
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 10000})
	if !l.takeOver(ctx, 1) {
		t.Fatal("takeOver failed")
	}
	idx := st.FSM().AppliedIndex()
	left, err := callLeader(ctx, st, leaderCallKeepAlive, 7)
	if err != nil || left < 9*time.Second || left > 10*time.Second {
		t.Fatalf("first keepalive: %v, %v", left, err)
	}
	if got := st.FSM().AppliedIndex(); got != idx+1 {
		t.Fatalf("first keepalive wrote %d entries, want 1", got-idx)
	}
	if ls, _ := st.FSM().View().Lease(7); ls.Remaining < 9900 {
		t.Fatalf("renewal wrote remaining %d ms", ls.Remaining)
	}
	left, err = callLeader(ctx, st, leaderCallKeepAlive, 7)
	if err != nil || left < 5*time.Second {
		t.Fatalf("second keepalive: %v, %v", left, err)
	}
	if got := st.FSM().AppliedIndex(); got != idx+1 {
		t.Fatal("second keepalive wrote an entry")
	}
	if !l.checkpoint(ctx) || st.FSM().AppliedIndex() != idx+2 {
		t.Fatal("checkpoint of the moved deadline not written")
	}
	if l.checkpoint(ctx); st.FSM().AppliedIndex() != idx+2 {
		t.Fatal("a checkpoint with nothing moved wrote an entry")
	}
	if _, err := callLeader(ctx, st, leaderCallKeepAlive, 99); err == nil {
		t.Fatal("keepalive of an unknown lease succeeded")
	}
	l.abdicate()
	if _, err := l.keepAlive(ctx, 7); err != raft.ErrNotLeader {
		t.Fatalf("keepalive on a follower: %v", err)
	}
}

// TestLessorObservesChangesOnly: after a first walk of every lease, the lessor keeps
// up from the leases changed since (grants, checkpoints, revokes), and ends where a
// fresh lessor walking every lease ends.
func TestLessorObservesChangesOnly(t *testing.T) {
	st, l := newLessorFixture(t)
	for id := int64(1); id <= 3; id++ {
		mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: id, LeaseTTL: 5000})
	}
	t0 := time.Now()
	l.observe(st.FSM().View(), t0)
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseRevoke, LeaseIDs: []int64{2}})
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseCheckpoint, Checkpoints: []fsm.LeaseCheckpoint{{ID: 3, Remaining: 1000}}})
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 4, LeaseTTL: 5000})
	t1 := t0.Add(time.Second)
	scans := l.mu.scans
	l.observe(st.FSM().View(), t1)
	if l.mu.scans != scans {
		t.Fatal("the lessor walked every lease again to see three changes")
	}
	fresh := New(st, hclog.NewNullLogger())
	fresh.observe(st.FSM().View(), t1)
	if len(l.mu.seen) != 3 || len(fresh.mu.seen) != 3 {
		t.Fatalf("seen %v, a fresh lessor %v: want leases 1, 3, 4", l.mu.seen, fresh.mu.seen)
	}
	for id, f := range fresh.mu.seen {
		c, ok := l.mu.seen[id]
		if !ok || c.index != f.index || c.remaining != f.remaining || c.ttl != f.ttl {
			t.Errorf("lease %d: incremental %+v, fresh %+v", id, c, f)
		}
	}
	if c := l.mu.seen[1]; !c.at.Equal(t0) {
		t.Errorf("lease 1 unchanged since the first walk, seen at %v, want %v", c.at, t0)
	}
	if c := l.mu.seen[3]; !c.at.Equal(t1) || c.remaining != time.Second {
		t.Errorf("lease 3 checkpointed: %+v, want seen at %v with 1s remaining", c, t1)
	}
}

// A keepalive of a lease revoked since the lessor last looked is ErrLeaseNotFound,
// never a renewal of what no longer exists (kills: keepAlive trusting its stale seen
// map, which answered the full TTL for a revoked lease).
func TestLessorKeepAliveOfRevokedLease(t *testing.T) {
	st, l := newLessorFixture(t)
	ctx := context.Background()
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 10000})
	if !l.takeOver(ctx, 1) {
		t.Fatal("takeOver failed")
	}
	if _, err := l.keepAlive(ctx, 7); err != nil {
		t.Fatal(err)
	}
	mustApplyCmd(t, st, &fsm.Command{Type: fsm.CmdLeaseRevoke, LeaseIDs: []int64{7}})
	if left, err := l.keepAlive(ctx, 7); !errors.Is(err, fsm.ErrLeaseNotFound) {
		t.Fatalf("keepalive of a revoked lease = %v, %v; want ErrLeaseNotFound", left, err)
	}
}

// slowReadStore answers linearizable reads only after delay, as a leader does whose
// heartbeat round (confirming leadership) is slow on a loaded machine.
type slowReadStore struct {
	*lessorStore
	delay time.Duration
}

func (s slowReadStore) View(ctx context.Context, c fsm.Consistency) (*fsm.View, error) {
	if c == fsm.Linearizable {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.lessorStore.View(ctx, c)
}

// A new leader takes over although confirming its leadership takes longer than the
// lessor's poll: the wait is a heartbeat round and the term's barrier, which a loaded
// machine stretches past 100 ms, and a takeover given up after two polls is asked
// again only to give up again — the leader would serve no keepalive meanwhile.
func TestLessorTakeOverWaitsForSlowRead(t *testing.T) {
	st := slowReadStore{lessorStore: kvtest.NewLeading(), delay: 300 * time.Millisecond}
	l := New(st, hclog.NewNullLogger())
	if !l.takeOver(context.Background(), 1) {
		t.Fatal("takeOver gave up on a linearizable read that takes 300 ms")
	}
}
