package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/raft/wal"
)

// TestRebuildDamagedFollowerFromPeers: a follower's WAL is damaged while it is down
// (a byte flipped in a record that good records follow: not a torn write). Its restart
// fails naming the damage and `keel rebuild`; Rebuild removes it from the cluster and
// moves its state aside; restarted as before (no -join), it rejoins as a non-voter,
// catches up from a snapshot, is promoted, and serves every acknowledged write. At no
// point does the leader count it as a voter before it has applied every entry
// acknowledged before the damage.
func TestRebuildDamagedFollowerFromPeers(t *testing.T) {
	c := newTestClusterWith(t, 3, nil, func(cfg *Config) { cfg.Raft.TrailingLogs = 8 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	lead := c.leader()
	victim := (lead + 1) % 3
	want := map[string]string{}
	put := func(n int) {
		for i := 0; i < n; i++ {
			key, val := fmt.Sprintf("k/%03d", len(want)), fmt.Sprintf("v%d", len(want))
			if _, err := c.client(lead).Put(ctx, key, []byte(val)); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			want[key] = val
		}
	}
	put(100)
	c.waitConverged()
	dir := c.cfgs[victim].DataDir
	victimID := c.agents[victim].NodeID()
	c.stop(victim)
	put(50)
	// The leader compacts its log: the rebuilt node must catch up from a snapshot.
	if err := c.agents[lead].Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	acked := c.agents[lead].Node().Status().CommitIndex
	flipMiddleOfLastSegment(t, dir)

	c.cfgs[victim].Raft.Join = nil
	_, err := Start(ctx, c.cfgs[victim])
	if !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("start on the damaged log: %v, want wal.ErrCorrupt", err)
	}
	t.Logf("start on the damaged log refused:\n%v", err)
	for _, s := range []string{"keel rebuild -data-dir " + dir, "seg-", "offset", "entries from index"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("start error does not say %q:\n%v", s, err)
		}
	}

	rec, err := Rebuild(ctx, dir, c.client(lead), time.Now())
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if voter, in := suffrageOf(t, c.agents[lead], victimID); in {
		t.Fatalf("after Rebuild the leader still lists %s (voter %t)", victimID, voter)
	}
	if _, err := os.Stat(filepath.Join(rec.MovedTo, "raft", "wal")); err != nil {
		t.Fatalf("damaged state not kept: %v", err)
	}
	var rebuilt atomic.Pointer[Agent]
	stopWatch := watchNoEmptyVoter(t, c.agents[lead], victimID, acked, &rebuilt)
	c.start(victim)
	rebuilt.Store(c.agents[victim])
	waitFor(t, "rebuilt node promoted to voter", 60*time.Second, func() error {
		voter, in := suffrageOf(t, c.agents[lead], victimID)
		if !in || !voter || c.agents[victim].Node().Rejoining() {
			return fmt.Errorf("in configuration %t, voter %t, rejoining %t; %+v", in, voter, c.agents[victim].Node().Rejoining(), c.agents[victim].Node().Status())
		}
		return nil
	})
	if err := stopWatch(); err != nil {
		t.Fatal(err)
	}
	if snap := c.agents[victim].Node().Raft().Stats()["last_snapshot_index"]; snap == "0" {
		t.Errorf("the rebuilt node caught up without a snapshot")
	}
	waitFor(t, "rebuilt node applies the acknowledged entries", 30*time.Second, func() error {
		if got := c.agents[victim].Store().AppliedIndex(); got < acked {
			return fmt.Errorf("applied %d of %d", got, acked)
		}
		return nil
	})
	for key, val := range want {
		got, err := c.client(victim).Get(ctx, key, client.WithSerializable())
		if err != nil || string(got.Value) != val {
			t.Fatalf("on the rebuilt node %s = %v, %v; want %q", key, got, err, val)
		}
	}
	// The next restart is an ordinary one.
	c.restart(victim)
	c.waitConverged()
}

// flipMiddleOfLastSegment flips one byte halfway through the last WAL segment of
// dataDir: a record good records follow, which Open must refuse (wal.ErrCorrupt).
func flipMiddleOfLastSegment(t *testing.T, dataDir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dataDir, "raft", "wal", "seg-*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no WAL segment in %s: %v", dataDir, err)
	}
	slices.Sort(segs)
	path := segs[len(segs)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// suffrageOf reads a's latest Raft configuration for id.
func suffrageOf(t *testing.T, a *Agent, id string) (voter, in bool) {
	t.Helper()
	f := a.Node().Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatalf("configuration: %v", err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s.Suffrage == hraft.Voter, true
		}
	}
	return false, false
}

// watchNoEmptyVoter polls leader's configuration every few milliseconds until stopped:
// whenever it lists id as a voter, the rebuilt node (once started) must hold the log up
// to acked; stop reports the first time it did not.
func watchNoEmptyVoter(t *testing.T, leader *Agent, id string, acked uint64, rebuilt *atomic.Pointer[Agent]) (stop func() error) {
	done := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		var bad error
		for {
			select {
			case <-done:
				result <- bad
				return
			case <-time.After(5 * time.Millisecond):
			}
			f := leader.Node().Raft().GetConfiguration()
			if f.Error() != nil || bad != nil {
				continue
			}
			for _, s := range f.Configuration().Servers {
				if string(s.ID) != id || s.Suffrage != hraft.Voter {
					continue
				}
				var last uint64
				if a := rebuilt.Load(); a != nil {
					last = a.Node().LastIndex()
				}
				if last < acked {
					bad = fmt.Errorf("the leader counts %s as a voter while its log holds %d of the %d acknowledged entries", id, last, acked)
				}
			}
		}
	}()
	return func() error {
		close(done)
		return <-result
	}
}

// TestStartRefusesLostRaftState: a data dir that held Raft state and lost it, all of
// it or one part (issue #34: the log, the stable store), without a rebuild does not
// start, whatever its flags: the cluster may still count it as a voter. The error says
// what is missing and gives the keel rebuild command; rebuilt, the node is a voter
// again with every write.
func TestStartRefusesLostRaftState(t *testing.T) {
	for _, tc := range []struct{ name, remove, say string }{
		{"all", "raft", "all of it"},
		{"log", filepath.Join("raft", "wal"), "the log (DIR/raft/wal) is missing"},
		{"stable-store", filepath.Join("raft", "raft.db"), "the stable store (DIR/raft/raft.db: term and vote) is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			lead := c.leader()
			if _, err := c.client(lead).Put(ctx, "before", []byte("x")); err != nil {
				t.Fatal(err)
			}
			c.waitConverged()
			victim := (lead + 1) % 3
			dir := c.cfgs[victim].DataDir
			c.stop(victim)
			if err := os.Rename(filepath.Join(dir, tc.remove), filepath.Join(dir, "lost")); err != nil {
				t.Fatal(err)
			}
			cfg := c.cfgs[victim] // still with -join
			a, err := Start(ctx, cfg)
			if err == nil {
				a.Close(ctx)
				t.Fatal("a node that lost raft state started")
			}
			say := strings.ReplaceAll(tc.say, "DIR", dir)
			if !errors.Is(err, raft.ErrStateLost) || !strings.Contains(err.Error(), "keel rebuild -data-dir "+dir) ||
				!strings.Contains(err.Error(), say) {
				t.Fatalf("start: %v\nwant raft.ErrStateLost, %q and the rebuild command", err, say)
			}
			if tc.name == "all" {
				return
			}
			if _, err := Rebuild(ctx, dir, c.client(lead), time.Now()); err != nil {
				t.Fatalf("rebuild: %v", err)
			}
			c.cfgs[victim].Raft.Join = nil
			c.start(victim)
			waitFor(t, "rebuilt node a voter again", 30*time.Second, func() error {
				voter, in := suffrageOf(t, c.agents[c.leader()], c.agents[victim].NodeID())
				if !in || !voter || c.agents[victim].Node().Rejoining() {
					return fmt.Errorf("in configuration %t, voter %t", in, voter)
				}
				return nil
			})
			c.waitConverged()
			got, err := c.client(victim).Get(ctx, "before", client.WithSerializable())
			if err != nil || string(got.Value) != "x" {
				t.Fatalf("on the rebuilt node before = %v, %v", got, err)
			}
		})
	}
}
