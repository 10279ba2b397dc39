package raft

import (
	"context"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// TestForwardedResultsCarryLeases: a transaction's get sent to a follower returns each
// key's lease, as it does on the leader. A leader of a release before rpcApplyLeases
// answers "unknown request kind" without applying; the follower sends the write again
// as rpcApply, so it is applied once, and its result comes back without leases.
func TestForwardedResultsCarryLeases(t *testing.T) {
	for _, old := range []bool{false, true} {
		c := newCluster(t, 3, func(cfg *Config) { cfg.noApplyLeasesRPC = old })
		lead := c.leader()
		f := c.nodes[(lead+1)%3]
		waitFor(t, 5*time.Second, "the gate at the newest format", func() bool {
			return c.nodes[lead].CommandFormatLimit() == fsm.MaxCommandFormat
		})
		apply := func(cmd *fsm.Command) *fsm.Result {
			t.Helper()
			res, err := f.Apply(context.Background(), cmd)
			if err != nil || res.Err != nil {
				t.Fatalf("old=%v: %v %v", old, err, res)
			}
			return res
		}
		apply(&fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60_000})
		before := f.Store().View().Revision()
		apply(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte("l"), Value: []byte("v"), Lease: 7}}}})
		res := apply(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte("m"), Value: []byte("w")},
			{Type: fsm.OpGet, Key: []byte("l")}}}})
		if res.Revision != before+2 {
			t.Fatalf("old=%v: revision %d after two writes from %d: a write applied twice or lost", old, res.Revision, before)
		}
		want := int64(7)
		if old {
			want = 0
		}
		if kvs := res.Responses[1].KVs; len(kvs) != 1 || kvs[0].Lease != want || string(kvs[0].Value) != "v" {
			t.Fatalf("old=%v: forwarded get %+v, want l=v with lease %d", old, kvs, want)
		}
		if _, refused := f.oldLeaders.Load(c.nodes[lead].Addr()); refused != old {
			t.Fatalf("old=%v: leader remembered as refusing leases: %v", old, refused)
		}
	}
}
