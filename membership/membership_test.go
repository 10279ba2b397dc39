package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestClusterJoinUpdateLeave: three nodes join through n1; each sees the others'
// metadata; an UpdateMeta reaches everyone; a node that Leaves is seen as left.
func TestClusterJoinUpdateLeave(t *testing.T) {
	nodes := startCluster(t, "n", 3, nil)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	waitFor(t, "all nodes to see three alive members with their metadata", func() string {
		for _, o := range nodes {
			if ids := aliveIDs(o); !slices.Equal(ids, []string{"n1", "n2", "n3"}) {
				return fmt.Sprintf("%s sees %v", o.cfg.NodeID, ids)
			}
			for _, m := range o.Members() {
				want := testMeta(m.ID())
				if m.Meta.RaftAddr != want.RaftAddr || m.Meta.HTTPAddr != want.HTTPAddr || m.Meta.Release != "v1.0.0" || m.Meta.Incarnation == 0 {
					return fmt.Sprintf("%s sees %s meta %+v", o.cfg.NodeID, m.ID(), m.Meta)
				}
			}
		}
		return ""
	})
	if got := n1.Local(); got.ID() != "n1" || got.Status != StatusAlive || got.Addr != n1.addr() || got.Addr == "" {
		t.Errorf("n1.Local() = %+v", got)
	}
	for _, m := range n1.Members() { // stable now: Member agrees with Members
		if byID, ok := n1.Member(m.ID()); !ok || byID.Addr != m.Addr || byID.Meta.Incarnation != m.Meta.Incarnation {
			t.Errorf("Member(%q) = %+v, %v; Members has %+v", m.ID(), byID, ok, m)
		}
	}
	if _, ok := n1.Member("nope"); ok {
		t.Error("Member of an unknown NodeID found")
	}
	if m, _ := n2.member("n1"); m.Addr != n1.addr() {
		t.Errorf("n2 sees n1 at %q, n1 is at %q", m.Addr, n1.addr())
	}
	if !n2.Joined() || !n3.Joined() || n1.Joined() {
		t.Errorf("Joined: n1 %v n2 %v n3 %v, want false true true", n1.Joined(), n2.Joined(), n3.Joined())
	}
	waitFor(t, "n1 to deliver join events for n2 and n3", func() string {
		for _, id := range []string{"n2", "n3"} {
			if evs := n1.events(id); len(evs) == 0 || evs[0].Type != EventJoin {
				return fmt.Sprintf("events about %s: %v", id, evs)
			}
		}
		return ""
	})

	// UpdateMeta propagates.
	meta := testMeta("n2")
	meta.Release = "v1.1.0"
	meta.StorageVersions = map[string]StorageVersion{"core/configmaps": {EncodingVersion: "v2", DecodableVersions: []string{"v1", "v2"}}}
	incarnation := n2.Local().Meta.Incarnation
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := n2.UpdateMeta(ctx, meta); err != nil {
		t.Fatalf("UpdateMeta: %v", err)
	}
	if got := n2.Local().Meta; got.Release != "v1.1.0" || got.Incarnation != incarnation {
		t.Errorf("n2.Local().Meta = %+v, want release v1.1.0 and incarnation kept %d", got, incarnation)
	}
	waitFor(t, "n1 and n3 to see n2's new metadata", func() string {
		for _, o := range []*testNode{n1, n3} {
			m, _ := o.member("n2")
			if m.Meta.Release != "v1.1.0" || m.Meta.StorageVersions["core/configmaps"].EncodingVersion != "v2" {
				return fmt.Sprintf("%s sees %+v", o.cfg.NodeID, m.Meta)
			}
		}
		evs := n1.events("n2")
		if last := evs[len(evs)-1]; last.Type != EventUpdate || last.Member.Meta.Release != "v1.1.0" {
			return fmt.Sprintf("n1's last event about n2: %+v", last)
		}
		return ""
	})

	// A graceful leave is seen as left, not failed.
	if err := n3.Leave(ctx, 5*time.Second); err != nil { // generous: the suite runs packages in parallel on 2 cores
		t.Fatalf("Leave: %v", err)
	}
	if st := n3.Local().Status; st != StatusLeft {
		t.Errorf("n3.Local().Status = %v after Leave, want left", st)
	}
	if err := n3.UpdateMeta(ctx, testMeta("n3")); !errors.Is(err, ErrLeft) {
		t.Errorf("UpdateMeta after Leave: err = %v, want ErrLeft", err)
	}
	waitFor(t, "n1 and n2 to see n3 left", seesStatus([]*testNode{n1, n2}, "n3", StatusLeft))
	waitFor(t, "n1 to deliver a leave event for n3", func() string {
		evs := n1.events("n3")
		if last := evs[len(evs)-1]; last.Type != EventLeave || last.Member.Status != StatusLeft {
			return fmt.Sprintf("n1's last event about n3: %v %v", last.Type, last.Member.Status)
		}
		return ""
	})
	n3.close(t)
	if m, _ := n1.member("n3"); m.Status != StatusLeft {
		t.Errorf("after n3 closed, n1 sees it %v, want still left", m.Status)
	}
}

// TestClusterFailureAndRejoin: a node closed without Leave is declared dead by the
// others within the probe timings and stays listed as dead; restarted under the same
// NodeID on another port (a wiped node) it rejoins with its new incarnation.
func TestClusterFailureAndRejoin(t *testing.T) {
	nodes := startCluster(t, "f", 3, nil)
	f1, f2, f3 := nodes[0], nodes[1], nodes[2]
	waitFor(t, "three alive members everywhere", func() string {
		for _, o := range nodes {
			if len(aliveIDs(o)) != 3 {
				return fmt.Sprintf("%s sees %v", o.cfg.NodeID, aliveIDs(o))
			}
		}
		return ""
	})
	oldInc := f3.Local().Meta.Incarnation
	oldAddr := f3.addr()

	stopped := time.Now()
	f3.close(t) // abrupt: no leave message
	waitFor(t, "f1 and f2 to declare f3 dead", seesStatus([]*testNode{f1, f2}, "f3", StatusDead))
	detect := time.Since(stopped)
	t.Logf("failure detected after %v", detect)
	dead, _ := f1.member("f3")
	if dead.LastChange.Before(stopped) || dead.Meta.Incarnation != oldInc {
		t.Errorf("dead member %+v: want LastChange after %v and the old incarnation", dead, stopped)
	}
	waitFor(t, "f1 to deliver a failed event for f3", func() string {
		evs := f1.events("f3")
		if last := evs[len(evs)-1]; last.Type != EventFailed || last.Member.Status != StatusDead {
			return fmt.Sprintf("last event about f3: %v %v", last.Type, last.Member.Status)
		}
		return ""
	})

	// Restart f3 wiped: same NodeID, fresh incarnation, a new port.
	cfg := testConfig("f3")
	cfg.Join = []string{f1.addr()}
	f3b := startNode(t, cfg, testMeta("f3"))
	newInc := f3b.Local().Meta.Incarnation
	if newInc == oldInc || f3b.addr() == oldAddr {
		t.Fatalf("restart reused incarnation %d or address %s", newInc, oldAddr)
	}
	waitFor(t, "f1 and f2 to see f3 alive with its new incarnation", func() string {
		for _, o := range []*testNode{f1, f2} {
			m, _ := o.member("f3")
			if m.Status != StatusAlive || m.Meta.Incarnation != newInc || m.Addr != f3b.addr() {
				return fmt.Sprintf("%s sees f3 %v incarnation %d at %s", o.cfg.NodeID, m.Status, m.Meta.Incarnation, m.Addr)
			}
		}
		return ""
	})
	waitFor(t, "f1 to deliver a join event for the new f3", func() string {
		evs := f1.events("f3")
		if last := evs[len(evs)-1]; last.Type != EventJoin || last.Member.Meta.Incarnation != newInc {
			return fmt.Sprintf("last event about f3: %v inc %d", last.Type, last.Member.Meta.Incarnation)
		}
		return ""
	})
}

// TestClusterFastRestartSameAddress: a node killed and restarted at once on the same
// address, before anyone notices, is seen with its new incarnation.
func TestClusterFastRestartSameAddress(t *testing.T) {
	nodes := startCluster(t, "r", 2, nil)
	r1, r2 := nodes[0], nodes[1]
	waitFor(t, "r1 to see r2", seesStatus([]*testNode{r1}, "r2", StatusAlive))
	oldInc := r2.Local().Meta.Incarnation

	cfg := r2.cfg
	cfg.BindAddr = r2.addr()
	r2.close(t)
	var r2b *testNode
	waitFor(t, "r2 to restart on its port", func() string {
		var err error
		if r2b, err = tryStartNode(t, cfg, testMeta("r2")); err != nil {
			return err.Error() // the port may linger for a moment
		}
		return ""
	})
	newInc := r2b.Local().Meta.Incarnation
	waitFor(t, "r1 to see r2's new incarnation", func() string {
		m, _ := r1.member("r2")
		if m.Status != StatusAlive || m.Meta.Incarnation != newInc {
			return fmt.Sprintf("r1 sees r2 %v incarnation %d (old %d, new %d)", m.Status, m.Meta.Incarnation, oldInc, newInc)
		}
		return ""
	})
}

// TestRetryJoin: a node told to retry-join an address nobody listens on yet joins
// once a node starts there.
func TestRetryJoin(t *testing.T) {
	addr := freeAddr(t)
	cfg := testConfig("j2")
	cfg.Join, cfg.RetryJoin = []string{addr}, true
	j2 := startNode(t, cfg, testMeta("j2")) // returns at once
	if j2.Joined() {
		t.Fatal("joined before anyone listens")
	}
	// The method form stops at its ctx's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := j2.RetryJoin(ctx, []string{addr}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RetryJoin with nobody listening: err = %v, want deadline exceeded", err)
	}
	c1 := testConfig("j1")
	c1.BindAddr = addr
	j1 := startNode(t, c1, testMeta("j1"))
	waitFor(t, "j2 to join j1", func() string {
		if !j2.Joined() || len(aliveIDs(j1)) != 2 {
			return fmt.Sprintf("joined %v, j1 sees %v", j2.Joined(), aliveIDs(j1))
		}
		return ""
	})
}

func TestOpenJoinFails(t *testing.T) {
	cfg := testConfig("x1")
	cfg.Join = []string{freeAddr(t)}
	_, err := Open(context.Background(), cfg, testMeta("x1"))
	if !errors.Is(err, ErrJoin) {
		t.Fatalf("Open with an unreachable Join: err = %v, want ErrJoin", err)
	}
	// The port was released: a node can start there now.
	cfg.Join = nil
	startNode(t, cfg, testMeta("x1"))
}

func TestOpenRejectsMismatchedMeta(t *testing.T) {
	cfg := testConfig("a")
	cfg.ClusterLabel = "blue"
	for i, meta := range []Meta{{NodeID: "b"}, {NodeID: "a", ClusterLabel: "red"}, {NodeID: "a", MinCommandFormat: 2}} {
		if _, err := Open(context.Background(), cfg, meta); !errors.Is(err, ErrInvalidMeta) {
			t.Errorf("#%d: Open err = %v, want ErrInvalidMeta", i, err)
		}
	}
	n := startNode(t, cfg, Meta{}) // NodeID and label come from cfg
	if got := n.Local().Meta; got.NodeID != "a" || got.ClusterLabel != "blue" || got.Incarnation == 0 {
		t.Errorf("Local().Meta = %+v", got)
	}
	if err := n.UpdateMeta(context.Background(), Meta{NodeID: "z"}); !errors.Is(err, ErrInvalidMeta) {
		t.Errorf("UpdateMeta with another NodeID: err = %v, want ErrInvalidMeta", err)
	}
}

func TestCloseIsFinal(t *testing.T) {
	n := startNode(t, testConfig("c1"), testMeta("c1"))
	n.close(t)
	ctx := context.Background()
	if _, ok := <-n.Events(); ok {
		t.Error("Events channel still open after Close")
	}
	if err := n.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := n.Join(ctx, []string{"127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Join after Close: %v, want ErrClosed", err)
	}
	if err := n.UpdateMeta(ctx, testMeta("c1")); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdateMeta after Close: %v, want ErrClosed", err)
	}
	if err := n.Leave(ctx, time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Close: %v, want ErrClosed", err)
	}
}
