package membership

import (
	"slices"
	"testing"
)

// mem builds a test member: id, status, BootstrapExpect; opts adjust the metadata.
func mem(id string, st Status, expect int, opts ...func(*Meta)) Member {
	m := Member{Status: st, Meta: Meta{NodeID: id, RaftAddr: id + ":7371", BootstrapExpect: expect,
		ClusterLabel: "c", MinCommandFormat: 1, MaxCommandFormat: 2}}
	for _, o := range opts {
		o(&m.Meta)
	}
	return m
}

var (
	raftState  = func(m *Meta) { m.HasRaftState = true }
	leaving    = func(m *Meta) { m.Leaving = true }
	noRaftAddr = func(m *Meta) { m.RaftAddr = "" }
	label      = func(l string) func(*Meta) { return func(m *Meta) { m.ClusterLabel = l } }
	formats    = func(lo, hi int) func(*Meta) {
		return func(m *Meta) { m.MinCommandFormat, m.MaxCommandFormat = lo, hi }
	}
)

func TestBootstrapReady(t *testing.T) {
	const A, D, L = StatusAlive, StatusDead, StatusLeft
	cases := []struct {
		expect  int
		members []Member
		want    []string // voter IDs; nil = not ok
	}{
		// n3 n1 n2 all alive expecting 3 → ready, voters sorted by NodeID.
		{3, []Member{mem("n3", A, 3), mem("n1", A, 3), mem("n2", A, 3)}, []string{"n1", "n2", "n3"}},
		// Only two seen yet.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3)}, nil},
		// The third is dead or left: not counted.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", D, 3)}, nil},
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", L, 3)}, nil},
		// Leaving, without a Raft address, or not expecting: not candidates.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3, leaving)}, nil},
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3, noRaftAddr)}, nil},
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 0)}, nil},
		// A plain member (expect 0) next to three candidates is not a voter.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3), mem("n4", A, 0)}, []string{"n1", "n2", "n3"}},
		// More candidates than expected: all are voters.
		{3, []Member{mem("n4", A, 3), mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3)}, []string{"n1", "n2", "n3", "n4"}},
		// Some alive member has Raft state (even one not expecting): never bootstrap again.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3, raftState)}, nil},
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3), mem("n4", A, 0, raftState)}, nil},
		// A dead member's stale Raft state does not block.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3), mem("n4", D, 0, raftState)}, []string{"n1", "n2", "n3"}},
		// Conflicting expectation anywhere alive: refuse.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3), mem("n4", A, 5)}, nil},
		// Conflicting cluster labels among candidates: refuse.
		{3, []Member{mem("n1", A, 3), mem("n2", A, 3), mem("n3", A, 3, label("other"))}, nil},
		// Same NodeID twice: inconsistent input.
		{2, []Member{mem("n1", A, 2), mem("n1", A, 2)}, nil},
		// expect <= 0 never bootstraps; expect 1 with itself does.
		{0, []Member{mem("n1", A, 0)}, nil},
		{1, []Member{mem("n1", A, 1)}, []string{"n1"}},
		{1, nil, nil},
	}
	for i, c := range cases {
		voters, ok := BootstrapReady(c.expect, c.members)
		var got []string
		for _, v := range voters {
			got = append(got, v.ID())
		}
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("#%d: BootstrapReady(%d) = %v, %v; want %v", i, c.expect, got, ok, c.want)
		}
	}
}

func TestBootstrapReadyCopiesMembers(t *testing.T) {
	in := []Member{mem("n1", StatusAlive, 1)}
	in[0].Meta.StorageVersions = map[string]StorageVersion{"r": {EncodingVersion: "v1"}}
	voters, ok := BootstrapReady(1, in)
	if !ok {
		t.Fatal("not ready")
	}
	voters[0].Meta.StorageVersions["r"] = StorageVersion{EncodingVersion: "changed"}
	if in[0].Meta.StorageVersions["r"].EncodingVersion != "v1" {
		t.Error("BootstrapReady voters share metadata with its input")
	}
}

func TestServersMeetMinimumCommandFormat(t *testing.T) {
	const A, D = StatusAlive, StatusDead
	cases := []struct {
		members []Member
		format  int
		want    bool
	}{
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", A, 0, formats(1, 3))}, 3, true},
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", A, 0, formats(1, 2))}, 3, false},
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", A, 0, formats(1, 2))}, 2, true},
		// A dead or left old node does not hold the cluster back; a leaving one does.
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", D, 0, formats(1, 1))}, 3, true},
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", StatusLeft, 0, formats(1, 1))}, 3, true},
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", A, 0, formats(1, 1), leaving)}, 3, false},
		{[]Member{mem("n1", StatusSuspect, 0, formats(1, 1))}, 2, false},
		{nil, 9, true},
	}
	for i, c := range cases {
		if got := ServersMeetMinimumCommandFormat(c.members, c.format); got != c.want {
			t.Errorf("#%d: ServersMeetMinimumCommandFormat(%d) = %v, want %v", i, c.format, got, c.want)
		}
	}
}

func TestCommonCommandFormat(t *testing.T) {
	const A, D = StatusAlive, StatusDead
	cases := []struct {
		members []Member
		lo, hi  int
		ok      bool
	}{
		// n1 [1..3], n2 [2..4] → [2..3]
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", A, 0, formats(2, 4))}, 2, 3, true},
		// n1 [1..1], n2 [2..2] → disjoint
		{[]Member{mem("n1", A, 0, formats(1, 1)), mem("n2", A, 0, formats(2, 2))}, 0, 0, false},
		// dead n2 ignored
		{[]Member{mem("n1", A, 0, formats(1, 3)), mem("n2", D, 0, formats(5, 5))}, 1, 3, true},
		{[]Member{mem("n1", D, 0)}, 0, 0, false},
		{nil, 0, 0, false},
	}
	for i, c := range cases {
		lo, hi, ok := CommonCommandFormat(c.members)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("#%d: CommonCommandFormat = %d, %d, %v; want %d, %d, %v", i, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}
