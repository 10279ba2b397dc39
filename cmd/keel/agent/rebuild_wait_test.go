package agent

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// laggingPeer is a live member whose view of the configuration trails its leader's:
// after RemovePeer it still lists the removed node for a few answers, then knows no
// leader for a few more, as a follower that has not yet applied the change, or is
// between leaders, answers.
type laggingPeer struct {
	RebuildPeer
	raftDir string // must stay in place while the answers are stale

	mu      sync.Mutex
	removed string
	stale   int // answers left that still list removed
	noLead  int // answers left, after those, with no leader
	moved   bool
}

func (p *laggingPeer) RemovePeer(ctx context.Context, id string) error {
	err := p.RebuildPeer.RemovePeer(ctx, id)
	p.mu.Lock()
	p.removed, p.stale, p.noLead = id, 5, 3
	p.mu.Unlock()
	return err
}

func (p *laggingPeer) Status(ctx context.Context) (*api.StatusResponse, error) {
	st, err := p.RebuildPeer.Status(ctx)
	if err != nil {
		return st, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed == "" || (p.stale == 0 && p.noLead == 0) {
		return st, nil
	}
	if _, err := os.Stat(p.raftDir); err != nil {
		p.moved = true // the state went while this member still answers stale
	}
	if p.stale > 0 {
		p.stale--
		st.Members = append(st.Members, api.Member{ID: p.removed, Address: "127.0.0.1:1"})
		return st, nil
	}
	p.noLead--
	st.LeaderID = ""
	return st, nil
}

// Rebuild moves the Raft state aside only once the member it asks shows the removal
// committed: listed no more, under a leader. Asked of a member whose view trails (the
// leader shows it at once), it waits; a Rebuild that returned after RemovePeer alone
// would move the state of a node the cluster still counts as a voter.
func TestRebuildWaitsForTheRemovalToShow(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.leader()
	victim := (lead + 1) % 3
	dir := c.cfgs[victim].DataDir
	c.stop(victim)
	peer := &laggingPeer{RebuildPeer: c.client(lead), raftDir: filepath.Join(dir, "raft")}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec, err := Rebuild(ctx, dir, peer, time.Now())
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	peer.mu.Lock()
	defer peer.mu.Unlock()
	if peer.stale != 0 || peer.noLead != 0 {
		t.Fatalf("Rebuild returned while the member still listed the node (%d stale answers left) or knew no leader (%d left)", peer.stale, peer.noLead)
	}
	if peer.moved {
		t.Fatal("the Raft state was moved aside while the member still answered with the node listed or no leader")
	}
	if rec.MovedTo == "" {
		t.Fatal("no Raft state moved aside")
	}
}
