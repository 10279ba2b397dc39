package raft

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// TestFormatGateWithoutGossip: with no gossip, the leader learns from the voters over
// RPC which command formats they apply. A voter of a release before that RPC (it
// answers "unknown request kind") holds the limit at format 2, so a format-3 command
// (a lease grant) is refused with ErrFormatNotAgreed and nothing is written; once the
// voter runs this release again the gate lifts.
func TestFormatGateWithoutGossip(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	old := (lead + 1) % 3
	grant := &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60_000}
	waitFor(t, 5*time.Second, "the gate at the newest format", func() bool {
		return c.nodes[lead].CommandFormatLimit() == fsm.MaxCommandFormat
	})
	c.nodes[old].shutdown()
	cfg := c.cfgs[old]
	cfg.noFormatsRPC = true
	c.cfgs[old] = cfg
	c.restart(old)
	lead = c.leader()
	waitFor(t, 5*time.Second, "the gate at format 2", func() bool {
		return c.nodes[lead].CommandFormatLimit() == fsm.CommandFormatV2
	})
	rev := c.nodes[lead].Store().View().Revision()
	if _, err := c.nodes[lead].Apply(context.Background(), grant); !errors.Is(err, ErrFormatNotAgreed) {
		t.Fatalf("format-3 command with a format-2 voter: %v, want ErrFormatNotAgreed", err)
	}
	mustPut(t, c.nodes[lead], "k", "format 2 still goes") // ordinary writes are unaffected
	if got := c.nodes[lead].Store().View().Revision(); got != rev+1 {
		t.Fatalf("revision %d after a refused grant and one put, want %d", got, rev+1)
	}
	c.nodes[old].shutdown()
	cfg.noFormatsRPC = false
	c.cfgs[old] = cfg
	c.restart(old)
	waitFor(t, 5*time.Second, "the gate lifted", func() bool {
		l := c.leader()
		return c.nodes[l].CommandFormatLimit() == fsm.MaxCommandFormat
	})
	if res, err := c.nodes[c.leader()].Apply(context.Background(), grant); err != nil || res.Err != nil {
		t.Fatalf("grant once every voter applies format 3: %v %v", err, res)
	}
}
