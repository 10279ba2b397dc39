package raft

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft/wal"
)

// Node is one replica: hashicorp/raft over the store, the raft port and keel's RPC.
type Node struct {
	cfg   Config
	log   hclog.Logger
	store *fsm.Store
	fsm   *fsmAdapter
	raft  *hraft.Raft
	bolt  *raftboltdb.BoltStore // stable store (term, vote)
	wal   *wal.Store            // the log
	trans *hraft.NetworkTransport
	mux   *mux
	addr  string // advertised raft address

	existing bool   // raft state was on disk at Open
	nonce    uint64 // random per Open: tells a restarted process from the previous one

	pool     rpcPool
	rpcConns connSet

	lead    atomic.Pointer[leaderState] // non-nil while this node leads
	verify  verifier
	members atomic.Pointer[[]Member]
	// formatLimit is the newest command format every voter can apply, as the embedding
	// agent last learned from gossip (SetCommandFormatLimit); the leader proposes
	// nothing newer.
	formatLimit atomic.Uint32

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeMu sync.Mutex
	closed  bool
}

// leaderState is one term of leadership. ready closes once the term's barrier has
// applied every entry of earlier terms; only then may reads be served from the store.
//
// The barrier is an empty command rather than raft's own Barrier: the state machine sees
// it, so every index a read may wait for after it (commands, configuration changes) is
// one the store's applied index reaches. raft.Barrier entries and the term's no-op never
// reach the state machine, and a read waiting for one of those would wait forever.
type leaderState struct {
	term  uint64
	ready chan struct{}
}

// Open starts the node: it recovers Raft state from cfg.DataDir, or bootstraps or
// joins a cluster when there is none.
func Open(ctx context.Context, cfg Config, store *fsm.Store) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raft: data dir: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("raft: listen %s: %w", cfg.BindAddr, err)
	}
	advertise := cfg.AdvertiseAddr
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("raft: advertise address %q: %w", advertise, err)
	}
	nctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, log: cfg.Logger, store: store, fsm: newFSMAdapter(store), addr: advertise,
		ctx: nctx, cancel: cancel}
	n.verify.n = n
	n.formatLimit.Store(uint32(fsm.MaxCommandFormat))
	var nb [8]byte
	rand.Read(nb[:])
	n.nonce = binary.BigEndian.Uint64(nb[:]) | 1
	n.members.Store(&[]Member{})
	n.mux = newMux(ln, adv, n.serveRPC)
	if err := n.start(ctx, dir); err != nil {
		n.mux.Close()
		cancel()
		if n.wal != nil {
			n.wal.Close()
		}
		if n.bolt != nil {
			n.bolt.Close()
		}
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context, dir string) error {
	cfg := n.cfg
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("raft: open log store: %w", err)
	}
	n.bolt = bolt
	w, err := openLogStore(dir, bolt, n.log)
	if err != nil {
		return fmt.Errorf("raft: open log: %w", err)
	}
	n.wal = w
	var store hraft.LogStore = w
	if cfg.wrapLogStore != nil {
		store = cfg.wrapLogStore(w)
	}
	logs, err := hraft.NewLogCache(512, store)
	if err != nil {
		return err
	}
	snaps, err := hraft.NewFileSnapshotStoreWithLogger(dir, 2, n.log.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("raft: snapshot store: %w", err)
	}
	// MaxRPCsInFlight 1 turns pipelined replication off. Pipelining deadlocks a
	// follower's replication when the follower rejects an append (a full disk, say):
	// the leader keeps sending heartbeats but never another entry, so the follower never
	// catches up and never calls an election (hashicorp/raft#612; our disk-full chaos
	// scenario hit it). hashicorp measured that pipelining adds little once batching is
	// on, which it is here.
	n.trans = hraft.NewNetworkTransportWithConfig(&hraft.NetworkTransportConfig{
		Stream: streamLayer{n.mux}, MaxPool: 5, Timeout: 10 * time.Second, Logger: n.log.Named("transport"),
		MaxRPCsInFlight: 1,
	})
	rc := hraft.DefaultConfig()
	rc.LocalID = hraft.ServerID(cfg.NodeID)
	rc.Logger = n.log
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.NoSnapshotRestoreOnStart = false

	existing, err := hraft.HasExistingState(logs, bolt, snaps)
	if err != nil {
		return fmt.Errorf("raft: inspect state: %w", err)
	}
	r, err := hraft.NewRaft(rc, n.fsm, logs, bolt, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("raft: start: %w", err)
	}
	n.raft = r
	n.existing = existing
	switch {
	case existing:
		n.log.Info("recovered raft state", "applied", n.store.AppliedIndex())
	case cfg.Bootstrap:
		boot := hraft.Configuration{Servers: []hraft.Server{{
			Suffrage: hraft.Voter, ID: hraft.ServerID(cfg.NodeID), Address: hraft.ServerAddress(n.addr)}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, hraft.ErrCantBootstrap) {
			r.Shutdown()
			return fmt.Errorf("raft: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new cluster")
	case len(cfg.Join) > 0:
		n.wg.Add(1)
		go n.joinLoop()
	default:
		n.log.Warn("no raft state and neither bootstrap nor join: waiting to be added by a member")
	}
	n.wg.Add(3)
	go n.leaderLoop()
	go n.membersLoop()
	go n.compactLoop()
	return nil
}

// Addr is the advertised Raft address (the bound one when BindAddr had port 0).
func (n *Node) Addr() string { return n.addr }

// Raft exposes hashicorp/raft to tests and operator code.
func (n *Node) Raft() *hraft.Raft { return n.raft }

// Store is the replicated state machine.
func (n *Node) Store() *fsm.Store { return n.store }

// SetCommandFormatLimit sets the newest command format (fsm.CommandFormatV*) that every
// voter can apply; while this node leads it refuses newer ones with ErrFormatNotAgreed,
// so a node of an older release never meets a log entry it cannot decode (like Consul's
// ServersMeetMinimumVersion). It starts at fsm.MaxCommandFormat; the agent lowers it
// from gossip metadata. Safe for concurrent use.
func (n *Node) SetCommandFormatLimit(f byte) { n.formatLimit.Store(uint32(f)) }

// CommandFormatLimit is the value SetCommandFormatLimit last set.
func (n *Node) CommandFormatLimit() byte { return byte(n.formatLimit.Load()) }

// Apply replicates cmd and returns the state machine's result. On a follower the
// command is forwarded to the leader. Commands rejected before reaching the log
// (ErrNoLeader, ErrNotLeader) are retried until ApplyTimeout; a failure whose outcome is
// unknown returns ErrTimeout and is never retried, so a write is applied at most once.
// A command in a format some voter cannot apply fails with ErrFormatNotAgreed.
func (n *Node) Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	// Bound the retries by ApplyTimeout, unless the caller's deadline is sooner anyway
	// (a request's own timeout, usually): one timer per write is enough.
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > n.cfg.ApplyTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		defer cancel()
	}
	for {
		var (
			resp []byte
			err  error
		)
		if n.raft.State() == hraft.Leader {
			resp, err = n.applyLocal(data)
		} else if addr, _ := n.raft.LeaderWithID(); addr != "" && string(addr) != n.addr {
			resp, err = n.pool.call(ctx, string(addr), rpcApply, data)
		} else {
			err = ErrNoLeader
		}
		if err == nil {
			return fsm.DecodeResult(resp)
		}
		if errors.Is(err, errSent) {
			return nil, fmt.Errorf("%w: %v", ErrTimeout, err)
		}
		if !retriable(err) {
			return nil, err
		}
		if err := n.pause(ctx, err); err != nil {
			return nil, err
		}
	}
}

// retriable: the command certainly did not reach the log.
func retriable(err error) bool {
	if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) {
		return true
	}
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || (errors.As(err, &ne) && !errors.Is(err, errSent))
}

// pause waits a little before a retry; when ctx ends it returns the last error.
func (n *Node) pause(ctx context.Context, last error) error {
	select {
	case <-ctx.Done():
		if errors.Is(last, ErrNoLeader) || errors.Is(last, ErrNotLeader) {
			return ErrNoLeader
		}
		return fmt.Errorf("%w: %v", ErrNoLeader, last)
	case <-n.ctx.Done():
		return ErrShutdown
	case <-time.After(20 * time.Millisecond):
		return nil
	}
}

// applyLocal appends data to the log of this node, which must lead, and returns the
// encoded result.
func (n *Node) applyLocal(d data) ([]byte, error) {
	if n.raft.State() != hraft.Leader {
		return nil, ErrNotLeader
	}
	if len(d) > 0 && uint32(d[0]) > n.formatLimit.Load() {
		return nil, fmt.Errorf("%w: format %d, every voter applies up to %d", ErrFormatNotAgreed, d[0], n.formatLimit.Load())
	}
	f := n.raft.Apply(d, n.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, mapRaftErr(err)
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("raft: unexpected apply response %T", f.Response())
	}
	return fsm.EncodeResult(res)
}

func mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "unable to store logs"):
		// The leader could not write the entry to its own log (a full disk, say) and
		// stepped down before replicating it: certainly not applied, so another leader
		// may take the write.
		return fmt.Errorf("%w: leader could not store the entry: %v", ErrNotLeader, err)
	case errors.Is(err, hraft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, hraft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, hraft.ErrLeadershipLost), errors.Is(err, hraft.ErrEnqueueTimeout),
		errors.Is(err, hraft.ErrLeadershipTransferInProgress):
		// Possibly appended: the outcome is unknown.
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return err
}

// View returns a view of the store. A linearizable view reflects every write
// acknowledged before the call: the node learns the leader's commit index (confirmed
// by a heartbeat round) and waits until it has applied it.
func (n *Node) View(ctx context.Context, c Consistency) (*fsm.View, error) {
	if c == Serializable {
		return n.store.View(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	for {
		idx, err := n.readIndex(ctx)
		if err == nil {
			return n.waitApplied(ctx, idx)
		}
		if !retriable(err) && !errors.Is(err, errSent) {
			return nil, err
		}
		if err := n.pause(ctx, err); err != nil {
			return nil, err
		}
	}
}

func (n *Node) readIndex(ctx context.Context) (uint64, error) {
	if n.raft.State() == hraft.Leader {
		return n.leaderReadIndex(ctx)
	}
	addr, _ := n.raft.LeaderWithID()
	if addr == "" || string(addr) == n.addr {
		return 0, ErrNoLeader
	}
	resp, err := n.pool.call(ctx, string(addr), rpcReadIndex, nil)
	if err != nil {
		return 0, err
	}
	idx, k := binary.Uvarint(resp)
	if k <= 0 {
		return 0, errors.New("raft rpc: bad read index")
	}
	return idx, nil
}

// leaderReadIndex is the read index protocol on the leader: after this term's barrier,
// take the commit index, then confirm leadership with a heartbeat round that started
// after it was taken.
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	ls := n.lead.Load()
	if ls == nil {
		return 0, ErrNotLeader
	}
	select {
	case <-ls.ready:
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: waiting for the leader's first barrier", ErrNoLeader)
	}
	ci := n.raft.CommitIndex()
	if err := n.verify.run(ctx); err != nil {
		return 0, err
	}
	if n.lead.Load() != ls {
		return 0, ErrNotLeader
	}
	return ci, nil
}

// waitApplied waits until the store has applied idx and returns its view.
func (n *Node) waitApplied(ctx context.Context, idx uint64) (*fsm.View, error) {
	for {
		ch := n.fsm.appliedCh()
		if v := n.store.View(); v.AppliedIndex() >= idx {
			return v, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting to apply index %d", ErrTimeout, idx)
		case <-n.ctx.Done():
			return nil, ErrShutdown
		}
	}
}

// verifier coalesces VerifyLeader calls: a caller joins the next round to start, so
// every caller is covered by a heartbeat round that began after it asked, and a burst of
// reads costs one round.
type verifier struct {
	n       *Node
	mu      sync.Mutex
	next    *verifyRound
	running bool
}

type verifyRound struct {
	done chan struct{}
	err  error
}

func (v *verifier) run(ctx context.Context) error {
	v.mu.Lock()
	if v.next == nil {
		v.next = &verifyRound{done: make(chan struct{})}
	}
	round := v.next
	if !v.running {
		v.running = true
		go v.loop()
	}
	v.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return fmt.Errorf("%w: confirming leadership", ErrTimeout)
	}
}

func (v *verifier) loop() {
	for {
		v.mu.Lock()
		round := v.next
		v.next = nil
		if round == nil {
			v.running = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		if err := v.n.raft.VerifyLeader().Error(); err != nil {
			round.err = mapRaftErr(err)
			if errors.Is(err, hraft.ErrLeadershipLost) {
				round.err = ErrNotLeader
			}
		}
		close(round.done)
	}
}

// leaderLoop follows leadership changes: on winning, it runs the barrier that makes
// reads safe and proposes the cluster secret if the cluster has none.
func (n *Node) leaderLoop() {
	defer n.wg.Done()
	obs := make(chan hraft.Observation, 16)
	observer := hraft.NewObserver(obs, false, func(o *hraft.Observation) bool {
		_, ok := o.Data.(hraft.RaftState)
		return ok
	})
	n.raft.RegisterObserver(observer)
	defer n.raft.DeregisterObserver(observer)
	tick := time.NewTicker(250 * time.Millisecond) // observations can be dropped
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			n.lead.Store(nil)
			return
		case <-obs:
		case <-tick.C:
		}
		isLeader := n.raft.State() == hraft.Leader
		cur := n.lead.Load()
		switch {
		case isLeader && (cur == nil || cur.term != n.raft.CurrentTerm()):
			ls := &leaderState{term: n.raft.CurrentTerm(), ready: make(chan struct{})}
			n.lead.Store(ls)
			go n.becomeLeader(ls)
		case !isLeader && cur != nil:
			n.lead.Store(nil)
		}
	}
}

func (n *Node) becomeLeader(ls *leaderState) {
	barrier, _ := fsm.EncodeCommand(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{}})
	for n.ctx.Err() == nil && n.lead.Load() == ls {
		f := n.raft.Apply(barrier, n.cfg.ApplyTimeout)
		if err := f.Error(); err != nil {
			n.log.Warn("leader barrier failed", "error", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		close(ls.ready)
		n.log.Info("leader ready", "term", ls.term, "index", f.Index())
		break
	}
	if _, _, ok := n.store.ClusterMeta(); ok || n.ctx.Err() != nil {
		return
	}
	secret := make([]byte, 32)
	id := make([]byte, 8)
	rand.Read(secret)
	rand.Read(id)
	cmd := &fsm.Command{Type: fsm.CmdClusterMeta, ClusterID: hex.EncodeToString(id), Secret: secret}
	if _, err := n.Apply(n.ctx, cmd); err != nil {
		n.log.Warn("proposing cluster secret failed", "error", err)
	}
}

// ClusterSecret waits for the replicated cluster secret.
func (n *Node) ClusterSecret(ctx context.Context) ([]byte, error) {
	for {
		ch := n.fsm.appliedCh()
		if _, secret, ok := n.store.ClusterMeta(); ok {
			return secret, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-n.ctx.Done():
			return nil, ErrShutdown
		}
	}
}

// WaitForLeader waits until the node knows a leader.
func (n *Node) WaitForLeader(ctx context.Context) error {
	for {
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ErrNoLeader
		case <-n.ctx.Done():
			return ErrShutdown
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// compactStep and compactDuty pace the reclaiming of compacted history: steps that
// drop about compactStep versions (each holds the store's write lock for ~50 µs),
// separated by nineteen times the step's own duration, so compaction takes at most a
// twentieth of a core — every node reclaims at once, on cores that also serve the
// writes — and a write waits at most one short step. 1M superseded versions take
// about 4 s.
const (
	compactStep = 256
	compactDuty = 19
)

// compactLoop reclaims compacted history in bounded, paced steps so that writes are
// never held up for long.
func (n *Node) compactLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		for n.ctx.Err() == nil {
			start := time.Now()
			if _, more := n.store.CompactStep(compactStep); !more {
				break
			}
			time.Sleep(max(compactDuty*time.Since(start), 100*time.Microsecond))
		}
	}
}

// Snapshot takes a Raft snapshot now (tests and operators).
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Close hands leadership to another voter if this node leads, then stops raft and
// releases the data directory. It is safe to call more than once.
func (n *Node) Close(ctx context.Context) error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.raft.State() == hraft.Leader && n.otherVoters() > 0 {
		done := make(chan error, 1)
		go func() { done <- n.raft.LeadershipTransfer().Error() }()
		select {
		case err := <-done:
			if err != nil {
				n.log.Warn("leadership transfer before shutdown failed", "error", err)
			}
		case <-ctx.Done():
		}
	}
	return n.shutdown()
}

// shutdown stops everything without handing leadership over (a crash, for tests).
func (n *Node) shutdown() error {
	n.closed = true
	n.cancel()
	err := n.raft.Shutdown().Error()
	n.pool.close()
	n.rpcConns.CloseAll()
	n.trans.Close()
	n.mux.Close()
	n.wg.Wait()
	if cerr := n.wal.Close(); err == nil {
		err = cerr
	}
	if cerr := n.bolt.Close(); err == nil {
		err = cerr
	}
	return err
}

func (n *Node) otherVoters() int {
	c := 0
	for _, m := range *n.members.Load() {
		if m.Suffrage == "Voter" && m.ID != n.cfg.NodeID {
			c++
		}
	}
	return c
}
