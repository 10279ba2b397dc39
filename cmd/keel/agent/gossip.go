package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/raft"
)

// AutopilotConfig tunes the leader's reconciliation of gossip membership and the Raft
// configuration (like Consul's autopilot).
type AutopilotConfig struct {
	// ServerStabilizationTime: a new server is promoted to voter once it has been caught
	// up and alive this long.
	ServerStabilizationTime time.Duration
	// DeadServerThreshold: a server gossip has declared dead for this long is removed
	// from the Raft configuration (a server that left gracefully is removed at once).
	DeadServerThreshold time.Duration
	// MinQuorum: dead voters are never removed below this many voters.
	MinQuorum int
	// MaxTrailingLogs: a server this close to the leader's last index counts as caught up.
	MaxTrailingLogs uint64
	// Interval between reconciliation rounds.
	Interval time.Duration
	// UnvouchedServerThreshold: a server of the Raft configuration that no gossip
	// member vouches for (none has its ID and Raft address) is removed once this long
	// has passed since the leader first saw it so. It catches servers added by hand
	// over the Raft port (a stranger's add-voter frames) and stale addresses. Zero is
	// defaultUnvouchedThreshold; negative turns the check off (clusters that mix nodes
	// with and without gossip).
	UnvouchedServerThreshold time.Duration
	// EvenVoters lets autopilot promote a server that makes the number of voters even.
	// By default it keeps the count odd: four voters tolerate no more failures than
	// three and need a larger quorum, so a fourth server waits as a non-voter until a
	// fifth is ready and both are promoted together.
	EvenVoters bool
}

// defaultUnvouchedThreshold is the grace period of a Raft server no gossip member
// vouches for: long enough for a new node's gossip to reach the leader.
const defaultUnvouchedThreshold = 30 * time.Second

// DefaultAutopilotConfig suits a LAN.
func DefaultAutopilotConfig() AutopilotConfig {
	return AutopilotConfig{ServerStabilizationTime: 10 * time.Second, DeadServerThreshold: 30 * time.Second,
		MinQuorum: 3, MaxTrailingLogs: 256, Interval: time.Second, UnvouchedServerThreshold: defaultUnvouchedThreshold}
}

// gossip runs membership next to raft: it advertises this node, bootstraps the cluster
// once -bootstrap-expect servers are seen, and, on the leader, reconciles the Raft
// configuration with gossip.
type gossip struct {
	a  *Agent
	ml *membership.Membership
	// metaMu guards meta: the loop updates HasRaftState, the key-migration loop
	// KeyMigrations (keymigrations.go), a schema applied at run time
	// StorageVersions.
	metaMu  sync.Mutex
	meta    membership.Meta
	healthy map[string]time.Time // nonvoter ID → caught up since
	// peers remembers, per server, the process it last saw and whether that process
	// had data, so a server wiped and restarted under its old ID is recognized (wiped).
	peers map[string]peerSeen
	// wipedRemoved counts wiped servers this node removed as leader (tests read it).
	wipedRemoved atomic.Int64
	// unvouched: Raft servers no gossip member vouches for → when this leader first
	// saw them so; unvouchedRemoved counts the ones it removed (tests read it).
	unvouched        map[string]time.Time
	unvouchedRemoved atomic.Int64
	ready            []string // bootstrap set seen at the previous round
	stop             context.CancelFunc
	done             chan struct{}
}

func (a *Agent) startGossip(ctx context.Context) error {
	gcfg := *a.cfg.Gossip
	gcfg.NodeID = a.cfg.NodeID
	if gcfg.Logger == nil {
		gcfg.Logger = a.log
	}
	meta := membership.Meta{
		NodeID: a.cfg.NodeID, RaftAddr: a.node.Addr(), HTTPAddr: reachableAddr(a.HTTPAddr(), a.node.Addr()), Release: buildinfo.Version(),
		MinCommandFormat: int(fsm.MinCommandFormat), MaxCommandFormat: int(fsm.MaxCommandFormat),
		ClusterLabel: gcfg.ClusterLabel, BootstrapExpect: a.cfg.BootstrapExpect, HasRaftState: a.node.HasState(), Rejoining: a.node.Rejoining(),
		Incarnation: a.incarnation, StorageVersions: gossipStorageVersions(a.cfg.Schema),
	}
	if a.cfg.MaxCommandFormat > 0 {
		meta.MaxCommandFormat = a.cfg.MaxCommandFormat
	}
	ml, err := membership.Open(ctx, gcfg, meta)
	if err != nil {
		return err
	}
	// Until gossip shows what every voter applies, propose only the oldest format.
	a.node.SetCommandFormatLimit(fsm.MinCommandFormat)
	rctx, cancel := context.WithCancel(context.Background())
	g := &gossip{a: a, ml: ml, meta: meta, healthy: map[string]time.Time{},
		peers: map[string]peerSeen{}, unvouched: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	a.gossip = g
	go g.loop(rctx)
	return nil
}

// setStorageVersions announces the storage versions of a schema applied at run time.
func (g *gossip) setStorageVersions(ctx context.Context, svs map[string]membership.StorageVersion) error {
	g.metaMu.Lock()
	defer g.metaMu.Unlock()
	g.meta.StorageVersions = svs
	return g.ml.UpdateMeta(ctx, g.meta)
}

// stopLoop ends bootstrapping and the autopilot rounds; gossip itself keeps running.
func (g *gossip) stopLoop() {
	g.stop()
	<-g.done
}

// close stops gossip. Call it after Raft has shut down: until then peers must see this
// node alive, or a slow shutdown counts against the dead-server threshold and the
// leader may reap a server that is only restarting.
func (g *gossip) close(ctx context.Context) error {
	g.stopLoop()
	return g.ml.Close(ctx)
}

func (g *gossip) loop(ctx context.Context) {
	defer close(g.done)
	interval := g.a.cfg.Autopilot.Interval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		g.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-g.ml.Events():
		}
	}
}

func (g *gossip) round(ctx context.Context) {
	node := g.a.node
	g.metaMu.Lock()
	if has, rejoining := node.HasState(), node.Rejoining(); has != g.meta.HasRaftState || rejoining != g.meta.Rejoining {
		g.meta.HasRaftState, g.meta.Rejoining = has, rejoining
		if err := g.ml.UpdateMeta(ctx, g.meta); err != nil {
			g.a.log.Warn("update gossip metadata", "error", err)
		}
	}
	hasState := g.meta.HasRaftState
	g.metaMu.Unlock()
	members := g.ml.Members()
	g.updateFormatLimit(members)
	if !hasState && g.a.cfg.BootstrapExpect > 0 {
		g.maybeBootstrap(members)
		return
	}
	if node.IsLeader() {
		g.autopilot(ctx, members)
	}
}

// maybeBootstrap bootstraps once the same expect servers have been seen in two rounds
// in a row. Every node of the group takes the first expect candidates by node ID, so
// they propose one configuration; later servers are added by the leader's autopilot.
func (g *gossip) maybeBootstrap(members []membership.Member) {
	expect := g.a.cfg.BootstrapExpect
	voters, ok := membership.BootstrapReady(expect, members)
	if !ok {
		g.ready = nil
		return
	}
	voters = voters[:expect]
	ids := make([]string, len(voters))
	for i, v := range voters {
		ids[i] = v.ID()
	}
	if fmt.Sprint(ids) != fmt.Sprint(g.ready) {
		g.ready = ids
		return
	}
	self := false
	servers := make([]raft.Member, len(voters))
	for i, v := range voters {
		servers[i] = raft.Member{ID: v.ID(), Address: v.Meta.RaftAddr, Suffrage: hraft.Voter}
		self = self || v.ID() == g.a.cfg.NodeID
	}
	if !self {
		return // the group formed without us; the leader will add this node
	}
	if err := g.a.node.BootstrapServers(servers); err != nil {
		g.a.log.Warn("bootstrap", "error", err)
	}
}

type peerSeen struct {
	nonce    uint64
	withData bool
}

// wiped reports whether server s is a new process that started without Raft state
// although this leader saw an earlier process of it with data: it was wiped and
// restarted under its old ID, and has forgotten its log and the votes it cast. (A
// newly elected leader has no memory of earlier processes, so this is best effort.)
func (g *gossip) wiped(ctx context.Context, s raft.Member) bool {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := g.a.node.Peer(pctx, s.Address)
	if err != nil {
		return false
	}
	prev, known := g.peers[s.ID]
	g.peers[s.ID] = peerSeen{nonce: st.Nonce, withData: st.Recovered || st.Applied > 0}
	if known && prev.nonce != st.Nonce && prev.withData && !st.Recovered {
		return true
	}
	return false
}

// autopilot reconciles the Raft configuration with gossip membership: alive servers
// outside it join as non-voters, caught-up and stable non-voters become voters (keeping
// the number of voters odd unless EvenVoters), and
// servers dead past the threshold (or gone by a graceful leave) are removed, never
// below MinQuorum voters.
func (g *gossip) autopilot(ctx context.Context, members []membership.Member) {
	ap := g.a.cfg.Autopilot
	node := g.a.node
	byID := make(map[string]membership.Member, len(members))
	for _, m := range members {
		byID[m.ID()] = m
	}
	status := node.Status()
	inCfg := make(map[string]raft.Member, len(status.Members))
	voters := 0
	for _, s := range status.Members {
		inCfg[s.ID] = s
		if s.Suffrage == hraft.Voter {
			voters++
		}
	}
	opCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, m := range members {
		if _, ok := inCfg[m.ID()]; ok || m.Status != membership.StatusAlive || m.Meta.Leaving || m.Meta.RaftAddr == "" {
			continue
		}
		if err := node.AddNonvoter(opCtx, m.ID(), m.Meta.RaftAddr); err != nil {
			g.a.log.Warn("autopilot: add non-voter", "id", m.ID(), "error", err)
			continue
		}
		g.a.log.Info("autopilot: added non-voter", "id", m.ID(), "raft", m.Meta.RaftAddr)
	}
	now := time.Now()
	for id := range g.unvouched {
		if _, ok := inCfg[id]; !ok {
			delete(g.unvouched, id) // removed meanwhile (by an operator, or re-added later: start over)
		}
	}
	var ready []raft.Member // non-voters caught up and stable: promotable
	for _, s := range status.Members {
		if s.ID == g.a.cfg.NodeID {
			continue
		}
		m, known := byID[s.ID]
		if !known || m.Meta.RaftAddr != s.Address {
			if g.removeUnvouched(opCtx, s, voters, now) && s.Suffrage == hraft.Voter {
				voters--
			}
			continue
		}
		delete(g.unvouched, s.ID)
		if m.Status == membership.StatusAlive && g.wiped(opCtx, s) {
			// Unlike a dead server, a wiped one is removed even below MinQuorum: a voter
			// that forgot its votes is a safety hazard, fewer voters an availability
			// one; the next round adds it back as a non-voter, promoted once caught up.
			if s.Suffrage == hraft.Voter && voters <= 1 {
				continue
			}
			if err := node.RemoveServer(opCtx, s.ID); err != nil {
				g.a.log.Warn("autopilot: remove wiped server", "id", s.ID, "error", err)
				continue
			}
			if s.Suffrage == hraft.Voter {
				voters--
			}
			delete(g.healthy, s.ID)
			g.wipedRemoved.Add(1)
			g.a.log.Info("autopilot: server restarted without its data; re-adding it as a non-voter", "id", s.ID)
			continue
		}
		gone := m.Status == membership.StatusLeft ||
			(m.Status == membership.StatusDead && now.Sub(m.LastChange) > ap.DeadServerThreshold)
		if gone {
			if s.Suffrage == hraft.Voter && voters-1 < ap.MinQuorum {
				g.a.log.Warn("autopilot: not removing dead voter: would go below the minimum quorum",
					"id", s.ID, "voters", voters, "min_quorum", ap.MinQuorum)
				continue
			}
			if err := node.RemoveServer(opCtx, s.ID); err != nil {
				g.a.log.Warn("autopilot: remove server", "id", s.ID, "error", err)
				continue
			}
			if s.Suffrage == hraft.Voter {
				voters--
			}
			delete(g.healthy, s.ID)
			g.a.log.Info("autopilot: removed server", "id", s.ID, "gossip_status", m.Status.String())
			continue
		}
		if s.Suffrage != hraft.Voter && g.stable(opCtx, s, m, now) {
			ready = append(ready, s)
		}
	}
	for _, s := range ready[:g.promotable(voters, len(ready))] {
		if err := node.AddVoter(opCtx, s.ID, s.Address); err != nil {
			g.a.log.Warn("autopilot: promote", "id", s.ID, "error", err)
			break // the next round tries again (an even count left then promotes one)
		}
		delete(g.healthy, s.ID)
		g.a.log.Info("autopilot: promoted to voter", "id", s.ID)
	}
}

// promotable is how many of ready non-voters to promote next to voters voters: all of
// them with EvenVoters; otherwise as many as keep the count odd (one when it is even,
// an even number when it is odd).
func (g *gossip) promotable(voters, ready int) int {
	switch {
	case g.a.cfg.Autopilot.EvenVoters:
		return ready
	case voters%2 == 0:
		return min(ready, 1)
	default:
		return ready - ready%2
	}
}

// removeUnvouched removes server s, which no gossip member vouches for, once it has
// been so for UnvouchedServerThreshold; it reports whether s was removed. Such a
// server was never added by autopilot (which adds gossip members only): a stranger
// that sent add-server frames to the Raft port, or an address nobody answers for.
// A fake voter only costs quorum, so it goes even below MinQuorum (never the last).
func (g *gossip) removeUnvouched(ctx context.Context, s raft.Member, voters int, now time.Time) bool {
	limit := g.a.cfg.Autopilot.UnvouchedServerThreshold
	if limit < 0 {
		return false
	}
	if limit == 0 {
		limit = defaultUnvouchedThreshold
	}
	since, ok := g.unvouched[s.ID]
	if !ok {
		g.unvouched[s.ID] = now
		g.a.log.Warn("autopilot: a raft server no gossip member vouches for; removing it unless one does soon",
			"id", s.ID, "raft", s.Address, "after", limit)
		return false
	}
	if now.Sub(since) < limit || (s.Suffrage == hraft.Voter && voters <= 1) {
		return false
	}
	if err := g.a.node.RemoveServer(ctx, s.ID); err != nil {
		g.a.log.Warn("autopilot: remove unvouched server", "id", s.ID, "error", err)
		return false
	}
	delete(g.unvouched, s.ID)
	delete(g.healthy, s.ID)
	g.unvouchedRemoved.Add(1)
	g.a.log.Warn("autopilot: removed a raft server no gossip member vouches for", "id", s.ID, "raft", s.Address)
	return true
}

// stable reports whether non-voter s is ready to be a voter: alive, caught up, and so
// for ServerStabilizationTime. A server rebuilding from its peers (Meta.Rejoining) is
// never: its own rejoin asks to be promoted once caught up, and one actor owns that.
func (g *gossip) stable(ctx context.Context, s raft.Member, m membership.Member, now time.Time) bool {
	ap := g.a.cfg.Autopilot
	node := g.a.node
	caughtUp := false
	if m.Status == membership.StatusAlive && !m.Meta.Rejoining {
		applied, err := node.PeerAppliedIndex(ctx, s.Address)
		caughtUp = err == nil && applied+ap.MaxTrailingLogs >= node.LastIndex()
	}
	if !caughtUp {
		delete(g.healthy, s.ID)
		return false
	}
	since, ok := g.healthy[s.ID]
	if !ok {
		g.healthy[s.ID] = now
		return false
	}
	return now.Sub(since) >= ap.ServerStabilizationTime
}

// Members returns the gossip members, or nil when gossip is off.
func (a *Agent) Members() []membership.Member {
	if a.gossip == nil {
		return nil
	}
	return a.gossip.ml.Members()
}

// reachableAddr is listen as other machines reach it: when it listens on every
// interface (0.0.0.0, [::]), the host of the Raft advertise address, which is
// reachable by definition, with listen's port. Members announce their HTTP address so
// (keel members, keel top's scrapes); "[::]:7370" reached nobody.
func reachableAddr(listen, raftAdvertise string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if rh, _, err := net.SplitHostPort(raftAdvertise); err == nil {
			return net.JoinHostPort(rh, port)
		}
	}
	return listen
}
