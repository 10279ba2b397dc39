package agent

import (
	"context"
	"testing"
	"time"
)

// TestJoinThroughHTTPAddress: -join given a member's HTTP address (what `keel status`
// and the README show) joins through the Raft address that member reports, and the
// status names both the release and the Raft address.
func TestJoinThroughHTTPAddress(t *testing.T) {
	dir := t.TempDir()
	c := &testCluster{t: t}
	first := testConfig(t, dir, "n1")
	first.Raft.Bootstrap = true
	c.cfgs = append(c.cfgs, first)
	c.agents = append(c.agents, nil)
	c.start(0)
	t.Cleanup(func() { c.stop(0) })
	c.waitReady(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := c.client(0).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Release == "" || st.RaftAddr != c.agents[0].RaftAddr() {
		t.Fatalf("status release %q raft_addr %q, want a release and %s", st.Release, st.RaftAddr, c.agents[0].RaftAddr())
	}
	second := testConfig(t, dir, "n2")
	second.Raft.Join = []string{c.agents[0].HTTPAddr()}
	c.cfgs = append(c.cfgs, second)
	c.agents = append(c.agents, nil)
	c.start(1)
	t.Cleanup(func() { c.stop(1) })
	c.waitReady(1)
	cl := c.client(1)
	for {
		st, err := cl.Status(ctx)
		if err == nil && len(st.Members) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("n2 never joined through n1's HTTP address: %v %+v", err, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
