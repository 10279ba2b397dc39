package membership

// BootstrapReady decides whether a node started with -bootstrap-expect=expect may
// bootstrap a new Raft cluster now, and with which voters. It is pure: pass Members().
//
// Candidates are alive members, not leaving, with a RaftAddr and a BootstrapExpect of
// expect. ok is true only when
//   - expect > 0 and at least expect candidates are seen,
//   - every candidate has the same ClusterLabel,
//   - no alive member has another non-zero BootstrapExpect (two expectations
//     would let two groups bootstrap two clusters), and
//   - no member that is not dead or left has HasRaftState: a cluster already
//     exists, so new nodes must join it, never bootstrap a second one.
//
// voters holds every candidate (possibly more than expect) ordered by NodeID, so all
// nodes that see the same members propose the same configuration. Members with
// BootstrapExpect 0 are not voters; the reconciler adds them after bootstrap.
//
//	expect=3  n1{alive,exp 3} n2{alive,exp 3} n3{alive,exp 3}             → [n1 n2 n3], true
//	expect=3  n1{alive,exp 3} n2{alive,exp 3} n3{dead,exp 3}              → nil, false
//	expect=3  n1 n2 n3 {alive,exp 3} n4{alive,exp 0,HasRaftState}         → nil, false
func BootstrapReady(expect int, members []Member) (voters []Member, ok bool) {
	if expect <= 0 {
		return nil, false
	}
	seen := make(map[string]bool, len(members))
	for _, mem := range members {
		if seen[mem.Meta.NodeID] {
			return nil, false // one NodeID twice: inconsistent input
		}
		seen[mem.Meta.NodeID] = true
		if mem.Gone() {
			continue
		}
		if mem.Meta.HasRaftState {
			return nil, false
		}
		if mem.Status != StatusAlive || mem.Meta.Leaving || mem.Meta.BootstrapExpect == 0 {
			continue
		}
		if mem.Meta.BootstrapExpect != expect {
			return nil, false
		}
		if mem.Meta.RaftAddr == "" {
			continue
		}
		if len(voters) > 0 && mem.Meta.ClusterLabel != voters[0].Meta.ClusterLabel {
			return nil, false
		}
		voters = append(voters, mem.clone())
	}
	if len(voters) < expect {
		return nil, false
	}
	sortMembers(voters)
	return voters, true
}

// ServersMeetMinimumCommandFormat reports whether every member that is not dead or
// left can apply Raft commands of the given format (MaxCommandFormat >= format), so
// the leader may start proposing it (like Consul's ServersMeetMinimumVersion). It is
// true for an empty list.
func ServersMeetMinimumCommandFormat(members []Member, format int) bool {
	for _, mem := range members {
		if !mem.Gone() && mem.Meta.MaxCommandFormat < format {
			return false
		}
	}
	return true
}

// CommonCommandFormat returns the range of Raft command formats every member that is
// not dead or left can apply: [max of MinCommandFormat, min of MaxCommandFormat]. ok is
// false when there is no such member or the ranges do not overlap.
func CommonCommandFormat(members []Member) (lo, hi int, ok bool) {
	first := true
	for _, mem := range members {
		if mem.Gone() {
			continue
		}
		if first {
			lo, hi, first = mem.Meta.MinCommandFormat, mem.Meta.MaxCommandFormat, false
			continue
		}
		lo, hi = max(lo, mem.Meta.MinCommandFormat), min(hi, mem.Meta.MaxCommandFormat)
	}
	if first || lo > hi {
		return 0, 0, false
	}
	return lo, hi, true
}
