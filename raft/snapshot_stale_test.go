package raft

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// TestStaleSnapshotNotInstalled (issue #34 item 5): hashicorp/raft sends a follower a
// snapshot older than what the follower has applied, and installs it (installSnapshot
// never compares the snapshot's index with lastApplied). The path, over real nodes:
//
//  1. n_a leads; n_b and n_c snapshot at X; more writes commit up to S everywhere.
//  2. n_a is cut off. It still leads for a moment and appends writes that never
//     commit, more than TrailingLogs of them; then it snapshots at S, so its log
//     keeps only S+1.. (its uncommitted tail).
//  3. The majority elects a new leader, whose latest snapshot is at X < S.
//  4. After the heal the new leader probes n_a at S: n_a lacks S (compacted) and
//     rejects; the leader walks back one index per rejection, past its own first log
//     entry, and ships its latest snapshot, at X. n_a installs it: its state machine
//     goes back from S to X, and it serves revisions older than it served before.
//
// keel refuses the restore (fsm.Store.RestoreAt, fsmAdapter.Restore): n_a's revision
// never goes backwards, not across a restart either, and once the leader's snapshots
// pass n_a's log it catches up.
func TestStaleSnapshotNotInstalled(t *testing.T) {
	const trailing = 4
	c, network, ids := newProxiedCluster(t, 3, func(_ int, cfg *Config) {
		cfg.SnapshotThreshold = 1 << 30 // snapshots only when the test takes them
		cfg.SnapshotInterval = time.Hour
		cfg.TrailingLogs = trailing
		// The cut-off leader must append before it notices; leave it time on a busy box.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 600*time.Millisecond, 600*time.Millisecond, 600*time.Millisecond
	})
	a := c.leader()
	na := c.nodes[a]
	caughtUp := func(what string) {
		t.Helper()
		want := na.Store().AppliedIndex()
		waitFor(t, 10*time.Second, what, func() bool {
			for _, n := range c.nodes {
				if n.Store().AppliedIndex() < want {
					return false
				}
			}
			return true
		})
	}
	var keys []string
	put := func(n *Node, k string) {
		mustPut(t, n, k, "v")
		keys = append(keys, k)
	}
	for i := range 20 {
		put(na, fmt.Sprintf("a%02d", i))
	}
	caughtUp("the followers to apply the first writes")
	for i, n := range c.nodes {
		if i != a {
			if err := n.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	x, err := strconv.ParseUint(c.nodes[(a+1)%3].Raft().Stats()["last_snapshot_index"], 10, 64)
	if err != nil || x == 0 {
		t.Fatalf("follower snapshot index %d, %v", x, err)
	}
	for i := range 20 {
		put(na, fmt.Sprintf("b%02d", i))
	}
	caughtUp("the followers to apply the second writes")
	s, revS := na.Store().AppliedIndex(), na.Store().Revision()

	if err := network.Partition([]string{ids[a]}, others(ids, a)); err != nil {
		t.Fatal(err)
	}
	for i := range 4 * trailing {
		data, err := fsm.EncodeCommand(putCmd(fmt.Sprintf("lost%02d", i), "v"))
		if err != nil {
			t.Fatal(err)
		}
		na.Raft().Apply(data, time.Second) // never commits; nobody waits for it
	}
	waitFor(t, 5*time.Second, "the cut-off leader to append its uncommitted writes", func() bool {
		return na.Raft().LastIndex() > s+2*trailing
	})
	if err := na.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.ParseUint(na.Raft().Stats()["last_snapshot_index"], 10, 64); got < s {
		t.Fatalf("cut-off node snapshotted at %d, below its applied index %d", got, s)
	}
	b := -1
	waitFor(t, 10*time.Second, "a leader in the majority", func() bool {
		for i, n := range c.nodes {
			if i != a && n.IsLeader() {
				b = i
				return true
			}
		}
		return false
	})
	if err := network.Heal(); err != nil {
		t.Fatal(err)
	}

	// Watch n_a's revision from the heal on; the stale install shows as n_a's raft
	// recording the new leader's snapshot (at X) as its last.
	var low atomic.Int64
	low.Store(revS)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if r := na.Store().Revision(); r < low.Load() {
				low.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	waitFor(t, 40*time.Second, "the new leader to ship its snapshot (index "+fmt.Sprint(x)+") to n_a", func() bool {
		return na.fsm.refused.Load() > 0 || na.Raft().Stats()["last_snapshot_index"] == strconv.FormatUint(x, 10)
	})
	time.Sleep(100 * time.Millisecond)
	close(stop)
	<-done
	if low.Load() < revS {
		t.Fatalf("n_a served revision %d after the heal, older than the %d it had applied: "+
			"the snapshot at index %d was installed over its state at index %d", low.Load(), revS, x, s)
	}
	v := na.Store().View()
	for _, k := range keys {
		if _, err := v.Get([]byte(k), 0); err != nil {
			t.Fatalf("n_a lost acknowledged write %s: %v", k, err)
		}
	}
	t.Logf("n_a refused the snapshot at index %d over its state at %d (revision %d)", x, s, revS)

	// A restart restores n_a's newest snapshot: its own at S. Raft kept the one at X
	// it received, but orders snapshots by the term and index of their last entry
	// (file_snapshot.go:539), so X comes after S.
	na.shutdown()
	c.restart(a)
	na = c.nodes[a]
	if r := na.Store().Revision(); r < revS {
		t.Fatalf("n_a restarted at revision %d, older than the %d it had applied", r, revS)
	}

	// The leader's next snapshot passes n_a's uncommitted tail: n_a installs it and
	// is a replica like any other again.
	nb := c.nodes[b]
	for i := range 8 * trailing {
		put(nb, fmt.Sprintf("c%02d", i))
	}
	if err := nb.Snapshot(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 40*time.Second, "n_a to catch up with the leader", func() bool {
		return na.Store().View().Hash() == nb.Store().View().Hash()
	})
	v = na.Store().View()
	for _, k := range keys {
		if _, err := v.Get([]byte(k), 0); err != nil {
			t.Fatalf("n_a lost acknowledged write %s after catching up: %v", k, err)
		}
	}
}

// TestOperatorRestoreNotRefused: an operator's restore (RestoreSnapshot) brings back an
// older revision on purpose, and every node installs it: raft gives it an index past
// the whole log, so the refusal of older snapshots never applies to it.
func TestOperatorRestoreNotRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	ctx := context.Background()
	mustPut(t, c.nodes[lead], "a", "1")
	var saved bytes.Buffer
	if _, _, err := c.nodes[lead].SaveSnapshot(ctx, &saved); err != nil {
		t.Fatal(err)
	}
	savedRev := c.nodes[lead].Store().Revision()
	mustPut(t, c.nodes[lead], "a", "2")
	mustPut(t, c.nodes[lead], "b", "x")
	before := c.nodes[lead].Store().AppliedIndex()
	if err := c.nodes[lead].RestoreSnapshot(ctx, bytes.NewReader(saved.Bytes()), nil); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.nodes {
		waitFor(t, 10*time.Second, fmt.Sprintf("n%d to serve the restored state", i+1), func() bool {
			v := n.Store().View()
			kv, err := v.Get([]byte("a"), 0)
			_, berr := v.Get([]byte("b"), 0)
			return err == nil && string(kv.Value) == "1" && berr != nil
		})
		if r, idx := n.Store().Revision(), n.Store().AppliedIndex(); r != savedRev || idx <= before {
			t.Errorf("n%d: revision %d, applied index %d; want the saved revision %d at an index past %d",
				i+1, r, idx, savedRev, before)
		}
		if got := n.fsm.refused.Load(); got != 0 {
			t.Errorf("n%d refused %d snapshots", i+1, got)
		}
	}
}
