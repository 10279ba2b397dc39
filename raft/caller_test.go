package raft

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// TestForwardedCaller: a write with a caller sent to a follower reaches the leader's
// CallerChecker with that caller; a refusal comes back as ErrCallerRefused and nothing
// is applied; a write without a caller never meets the checker. A leader of a release
// before rpcApplyAs answers "unknown request kind" without applying: the follower sends
// the write again without its caller, so it is applied once, unchecked, as that release
// did, and the leader is remembered.
func TestForwardedCaller(t *testing.T) {
	for _, old := range []bool{false, true} {
		c := newCluster(t, 3, func(cfg *Config) { cfg.noApplyAsRPC = old })
		var checked atomic.Int64
		for _, n := range c.nodes {
			n.SetCallerChecker(func(_ context.Context, caller []byte, cmd *fsm.Command) error {
				checked.Add(1)
				if string(caller) != "good" || cmd.Type != fsm.CmdTxn {
					return errors.New("caller refused")
				}
				return nil
			})
		}
		lead := c.leader()
		f := c.nodes[(lead+1)%3]
		as := func(caller string) context.Context { return WithCaller(context.Background(), []byte(caller)) }
		rev := func() int64 { return c.nodes[lead].Store().View().Revision() }

		before := rev()
		if _, err := f.Apply(as("good"), putCmd("a", "1")); err != nil {
			t.Fatalf("old=%v: good caller: %v", old, err)
		}
		_, err := f.Apply(as("bad"), putCmd("b", "1"))
		switch {
		case !old && !errors.Is(err, ErrCallerRefused):
			t.Fatalf("bad caller: %v, want ErrCallerRefused", err)
		case old && err != nil:
			t.Fatalf("old leader: bad caller: %v, want applied unchecked", err)
		}
		if _, err := f.Apply(context.Background(), putCmd("c", "1")); err != nil {
			t.Fatalf("old=%v: no caller: %v", old, err)
		}
		want, calls := before+2, int64(2)
		if old {
			want, calls = before+3, 0
		}
		waitFor(t, 5*time.Second, "the writes applied on the leader", func() bool { return rev() >= want })
		if got := rev(); got != want || checked.Load() != calls {
			t.Fatalf("old=%v: revision %d from %d, want %d; %d checks, want %d", old, got, before, want, checked.Load(), calls)
		}
		if _, remembered := f.noCallerLeaders.Load(c.nodes[lead].Addr()); remembered != old {
			t.Fatalf("old=%v: leader remembered as refusing rpcApplyAs: %v", old, remembered)
		}
	}
}
