package raft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft/wal"
)

// syncHookFS is the operating system's file system whose files run *hook, when set,
// before each fdatasync: an error it returns is the fdatasync's.
type syncHookFS struct {
	wal.FS
	hook *atomic.Pointer[func() error]
}

func (f syncHookFS) Create(path string) (wal.File, error) {
	file, err := f.FS.Create(path)
	return syncHookFile{File: file, hook: f.hook}, err
}

func (f syncHookFS) Open(path string) (wal.File, error) {
	file, err := f.FS.Open(path)
	return syncHookFile{File: file, hook: f.hook}, err
}

type syncHookFile struct {
	wal.File
	hook *atomic.Pointer[func() error]
}

func (f syncHookFile) Sync() error {
	if h := f.hook.Load(); h != nil {
		if err := (*h)(); err != nil {
			return err
		}
	}
	return f.File.Sync()
}

// TestLeaderSyncFailsAfterFollowersHaveEntry: the leader sends a batch to its
// followers while its own fdatasync runs (hraft.AsyncLogStore), and that fdatasync
// fails after the followers hold the entry durably. The leader must step down (its
// store fails, the node stops), its client hears "unknown" (ErrTimeout) or, when two
// followers committed the entry, success, and the entry
// — on a majority without the leader — must end up committed on every node, the
// failed leader included once it restarts: one entry at that index everywhere, never
// another. With one follower down the entry reaches one follower only; that follower
// is then the only node that can win an election, so the entry still commits.
//
//	index   n-lead (failed)       follower A        follower B
//	  i     written, sync EIO     durable           durable (or down)
//	        → cut, store failed   → leads term+1    → follows
//	  i     restarts, receives i  commits i         holds i
func TestLeaderSyncFailsAfterFollowersHaveEntry(t *testing.T) {
	for _, down := range []bool{false, true} {
		t.Run(fmt.Sprint("one follower down=", down), func(t *testing.T) { testLeaderSyncFails(t, down) })
	}
}

func testLeaderSyncFails(t *testing.T, followerDown bool) {
	hooks := map[string]*atomic.Pointer[func() error]{}
	c := newCluster(t, 3, func(cfg *Config) {
		h := new(atomic.Pointer[func() error])
		hooks[cfg.NodeID] = h
		cfg.wrapLogFS = func(fs wal.FS) wal.FS { return syncHookFS{FS: fs, hook: h} }
	})
	lead := c.leader()
	leader := c.nodes[lead]
	mustPut(t, leader, "before", "x")
	var followers []int
	for i := range c.nodes {
		if i != lead {
			followers = append(followers, i)
		}
	}
	waitFor(t, 10*time.Second, "followers to catch up", func() bool {
		for _, f := range followers {
			if c.nodes[f].Store().AppliedIndex() < leader.Store().AppliedIndex() {
				return false
			}
		}
		return true
	})
	live := followers
	if followerDown {
		c.nodes[followers[1]].shutdown()
		c.nodes[followers[1]] = nil
		live = followers[:1]
	}
	target, _ := leader.wal.LastIndex()
	target++
	var followersHad atomic.Bool
	hook := func() error {
		hooks[leader.cfg.NodeID].Store(nil) // once: the cut that follows syncs for real
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			have := true
			for _, f := range live {
				last, _ := c.nodes[f].wal.LastIndex() // a follower's entries are durable
				have = have && last >= target
			}
			if have {
				followersHad.Store(true)
				break
			}
			time.Sleep(time.Millisecond)
		}
		return fmt.Errorf("injected: %w", syscall.EIO)
	}
	hooks[leader.cfg.NodeID].Store(&hook)

	d, err := fsm.EncodeCommand(putCmd("failed-sync", "x"))
	if err != nil {
		t.Fatal(err)
	}
	// With both followers up they commit the entry without the leader's own write,
	// and the leader, not waiting for that write (PATCHES.md §4), may answer before
	// its fdatasync fails: committed is the truth then. With one down the entry is
	// on one follower only and the answer must be "unknown".
	if _, err := leader.applyLocal(d); !errors.Is(err, ErrTimeout) && (followerDown || err != nil) {
		t.Fatalf("the write whose leader sync failed answered %v, want ErrTimeout (outcome unknown)", err)
	}
	select {
	case <-leader.LogFailed():
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's fdatasync failed but it did not stop (LogFailed)")
	}
	if !followersHad.Load() {
		t.Fatalf("the followers did not hold entry %d before the leader's fdatasync returned: "+
			"the leader replicates only after its own write", target)
	}
	if got, _ := leader.wal.LastIndex(); got >= target {
		t.Fatalf("the failed leader's log still holds %d (last %d)", target, got)
	}
	// The node is closing itself (logStoreFailed); Close waits for that to end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.Close(ctx); err != nil {
		t.Fatalf("close the failed leader: %v", err)
	}
	c.nodes[lead] = nil
	want := entryAt(t, c.nodes[live[0]], target)

	if followerDown {
		c.restart(followers[1])
	}
	next := c.leader()
	mustPut(t, c.nodes[next], "after", "x")
	c.restart(lead)
	next = c.leader()
	mustPut(t, c.nodes[next], "last", "x")
	applied := c.nodes[next].Store().AppliedIndex()
	var hash uint64
	for i, n := range c.nodes {
		waitFor(t, 15*time.Second, fmt.Sprintf("n%d to catch up", i+1), func() bool {
			return n.Store().AppliedIndex() >= applied
		})
		if got := entryAt(t, n, target); got.Term != want.Term || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("n%d: entry %d is term %d %q, want term %d %q", i+1, target, got.Term, got.Data, want.Term, want.Data)
		}
		view := n.Store().View()
		kv, err := view.Get([]byte("failed-sync"), 0)
		if err != nil || kv.Version != 1 {
			t.Fatalf("n%d: the entry the followers held is not applied once: %+v, %v", i+1, kv, err)
		}
		waitFor(t, 5*time.Second, fmt.Sprintf("n%d to settle", i+1), func() bool {
			return n.Store().AppliedIndex() == c.nodes[next].Store().AppliedIndex()
		})
		if h := n.Store().View().Hash(); i == 0 {
			hash = h
		} else if h != hash {
			t.Fatalf("n%d: state hash %x, n1's %x", i+1, h, hash)
		}
	}
}

// entryAt reads entry index of n's log.
func entryAt(t *testing.T, n *Node, index uint64) hraft.Log {
	t.Helper()
	var l hraft.Log
	if err := n.wal.GetLog(index, &l); err != nil {
		t.Fatalf("%s: entry %d: %v", n.cfg.NodeID, index, err)
	}
	return l
}
