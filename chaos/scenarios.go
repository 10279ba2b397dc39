package chaos

import "time"

// Scenarios is the suite `make chaos` runs, every fault kind at least once, each on
// the backends it declares. Windows are sized so the whole suite stays near 12 minutes
// on 2 cores.
func Scenarios() []Scenario {
	s := time.Second
	proc := []string{BackendProcess}
	both := []string{BackendProcess, BackendDocker}
	return []Scenario{
		{
			Name: "kill-leader", Nodes: 3, Window: 24 * s, Backends: both,
			Proves: "kill -9 of the leader and restart on its data loses no acknowledged write; a new leader serves fresh reads",
			Faults: []FaultSpec{{Kind: FaultKill, Target: TargetLeader, HoldMin: 1 * s, HoldMax: 4 * s, GapMin: 2 * s, GapMax: 4 * s}},
		},
		{
			Name: "kill-follower-random", Nodes: 5, Window: 24 * s, Backends: proc,
			Proves: "kill -9 of followers and of random nodes (sometimes the leader) on 5 nodes: restarts replay the log to the same state",
			Faults: []FaultSpec{
				{Kind: FaultKill, Target: TargetFollower, HoldMin: 1 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 3 * s},
				{Kind: FaultKill, Target: TargetRandom, HoldMin: 1 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 3 * s},
			},
		},
		{
			Name: "pause", Nodes: 3, Window: 24 * s, Backends: both,
			Proves: "a leader or node frozen (SIGSTOP) past the election timeout, then thawed, serves no stale read and loses no write",
			Faults: []FaultSpec{
				{Kind: FaultPause, Target: TargetLeader, HoldMin: 3 * s, HoldMax: 5 * s, GapMin: 2 * s, GapMax: 3 * s},
				{Kind: FaultPause, Target: TargetRandom, HoldMin: 3 * s, HoldMax: 5 * s, GapMin: 2 * s, GapMax: 3 * s},
			},
		},
		{
			Name: "isolate-leader", Nodes: 3, Window: 24 * s, Backends: both,
			Proves: "a leader cut off from its peers cannot acknowledge writes or serve linearizable reads from its stale state",
			Faults: []FaultSpec{{Kind: FaultIsolate, Target: TargetLeader, HoldMin: 3 * s, HoldMax: 6 * s, GapMin: 2 * s, GapMax: 3 * s}},
		},
		{
			Name: "split", Nodes: 5, Window: 24 * s, Backends: both,
			Proves: "with a majority/minority partition only the majority makes progress; the minority's writes are never acknowledged then lost",
			Faults: []FaultSpec{{Kind: FaultSplit, HoldMin: 3 * s, HoldMax: 6 * s, GapMin: 2 * s, GapMax: 3 * s}},
		},
		{
			Name: "one-way", Nodes: 3, Window: 24 * s, Backends: both,
			Proves: "asymmetric links (the leader cannot reach a follower, or a follower cannot reach the leader) break neither safety nor recovery",
			Faults: []FaultSpec{
				{Kind: FaultOneWay, Target: TargetLeader, HoldMin: 3 * s, HoldMax: 5 * s, GapMin: 2 * s, GapMax: 3 * s},
				{Kind: FaultOneWay, Target: TargetFollower, HoldMin: 3 * s, HoldMax: 5 * s, GapMin: 2 * s, GapMax: 3 * s},
			},
		},
		{
			Name: "bridge", Nodes: 5, Window: 24 * s, Backends: proc,
			Proves: "majorities ring: two halves joined by one bridge node, every node sees a majority, still one linearizable history",
			Faults: []FaultSpec{{Kind: FaultBridge, HoldMin: 4 * s, HoldMax: 7 * s, GapMin: 2 * s, GapMax: 3 * s}},
		},
		{
			Name: "delay-drop", Nodes: 3, Window: 24 * s, Backends: both,
			Proves: "slow links (delay with jitter around the heartbeat scale) and lossy links (messages lost, connections reset) only slow keel down",
			Faults: []FaultSpec{
				{Kind: FaultDelay, HoldMin: 4 * s, HoldMax: 6 * s, GapMin: 1 * s, GapMax: 2 * s, Delay: 40 * time.Millisecond, Jitter: 60 * time.Millisecond},
				{Kind: FaultDrop, HoldMin: 4 * s, HoldMax: 6 * s, GapMin: 1 * s, GapMax: 2 * s, DropRate: 0.05},
				{Kind: FaultDelay, HoldMin: 3 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 2 * s, Delay: 400 * time.Millisecond, Jitter: 400 * time.Millisecond},
			},
		},
		{
			Name: "membership", Nodes: 3, Window: 24 * s, Backends: proc,
			Proves: "voters added under load catch up and vote; removing and replacing voters keeps one history",
			Faults: []FaultSpec{
				{Kind: FaultAdd, HoldMin: 2 * s, GapMin: 2 * s, GapMax: 3 * s, Max: 1},
				{Kind: FaultReplace, Target: TargetFollower, HoldMin: 2 * s, GapMin: 2 * s, GapMax: 3 * s, Max: 1},
				{Kind: FaultRemove, Target: TargetLeader, HoldMin: 2 * s, GapMin: 2 * s, GapMax: 3 * s, Max: 1},
			},
		},
		{
			Name: "membership-add", Nodes: 3, Window: 20 * s, Backends: proc,
			Proves: "voters added under load (3 -> 5 nodes) catch up from the log or a snapshot and then serve linearizable reads",
			Faults: []FaultSpec{
				{Kind: FaultAdd, HoldMin: 4 * s, GapMin: 2 * s, GapMax: 4 * s, Max: 2},
				{Kind: FaultKill, Target: TargetLeader, HoldMin: 2 * s, HoldMax: 3 * s, GapMin: 2 * s, GapMax: 3 * s, Max: 1},
			},
		},
		{
			Name: "disk-full", Nodes: 3, Window: 24 * s, Disk: true, Backends: proc,
			Proves: "a node whose disk fills fails writes cleanly (no acknowledged write lost, no corruption) and catches up once space returns",
			Faults: []FaultSpec{{Kind: FaultDiskFull, Target: TargetDisk, HoldMin: 4 * s, HoldMax: 6 * s, GapMin: 3 * s, GapMax: 4 * s}},
		},
		{
			Name: "log-io", Nodes: 3, Window: 24 * s, Backends: proc,
			Proves: "I/O errors on a node's Raft log: a failed fdatasync on the leader makes it step down and exit (a restart recovers from disk), failed writes on a follower are cut off and retried; no acknowledged write is lost",
			Faults: []FaultSpec{
				{Kind: FaultLogIO, Target: TargetLeader, LogFault: "sync", HoldMin: 6 * s, HoldMax: 7 * s, GapMin: 2 * s, GapMax: 3 * s},
				{Kind: FaultLogIO, Target: TargetFollower, LogFault: "write", HoldMin: 3 * s, HoldMax: 5 * s, GapMin: 2 * s, GapMax: 3 * s},
			},
		},
		{
			Name: "slow-log", Nodes: 3, Window: 20 * s, Backends: proc,
			Proves: "a slow disk under the Raft log (every fdatasync 150 ms longer) on the leader, which writes its log while it replicates, or on a follower slows writes but loses none, and the node keeps running",
			Faults: []FaultSpec{
				{Kind: FaultLogIO, Target: TargetLeader, LogFault: "slow=150ms", HoldMin: 3 * s, HoldMax: 5 * s, GapMin: 1 * s, GapMax: 2 * s},
				{Kind: FaultLogIO, Target: TargetFollower, LogFault: "slow=150ms", HoldMin: 3 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 2 * s},
			},
		},
		{
			Name: "corrupt-log", Nodes: 3, Window: 24 * s, Backends: proc,
			Proves: "a follower whose Raft log is damaged while it is down (a flipped byte good records follow) refuses to start and names keel rebuild; rebuilt from its peers it rejoins as a non-voter, catches up and is a voter again; nothing acknowledged is lost",
			Faults: []FaultSpec{{Kind: FaultCorruptLog, Target: TargetFollower, HoldMin: 2 * s, HoldMax: 3 * s, GapMin: 3 * s, GapMax: 4 * s, Max: 2}},
		},
		{
			Name: "lose-raft-state", Nodes: 3, Window: 20 * s, Backends: proc,
			Proves: "a follower that lost one part of its Raft state while it was down (raft/wal, or raft.db with its term and vote) refuses to start naming the part and keel rebuild; rebuilt from its peers it is a voter again; nothing acknowledged is lost",
			Faults: []FaultSpec{
				{Kind: FaultLoseState, Target: TargetFollower, Part: "wal", HoldMin: 2 * s, HoldMax: 3 * s, GapMin: 3 * s, GapMax: 4 * s, Max: 1},
				{Kind: FaultLoseState, Target: TargetFollower, Part: "raft.db", HoldMin: 2 * s, HoldMax: 3 * s, GapMin: 3 * s, GapMax: 4 * s, Max: 1},
			},
		},
		{
			Name: "mixed", Nodes: 5, Window: 30 * s, Backends: proc,
			Proves: "a random mix of crashes, pauses, partitions and one-way links on 5 nodes (Jepsen's combined nemesis)",
			Faults: []FaultSpec{
				{Kind: FaultKill, Target: TargetRandom, HoldMin: 1 * s, HoldMax: 3 * s, GapMin: 1 * s, GapMax: 2 * s},
				{Kind: FaultSplit, HoldMin: 2 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 2 * s},
				{Kind: FaultPause, Target: TargetLeader, HoldMin: 2 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 2 * s},
				{Kind: FaultOneWay, Target: TargetLeader, HoldMin: 2 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 2 * s},
				{Kind: FaultIsolate, Target: TargetLeader, HoldMin: 2 * s, HoldMax: 4 * s, GapMin: 1 * s, GapMax: 2 * s},
			},
		},
	}
}

// ScenarioByName finds a scenario of the suite.
func ScenarioByName(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
