package raft

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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

	existing bool // raft state was on disk at Open
	// mark writes raft-member; rejoin is raft-rejoin's record (nil: none), and
	// rejoining is true until the rebuilt node is a voter again (rejoin.go).
	mark      memberMark
	rejoin    *RejoinRecord
	rejoining atomic.Bool
	nonce     uint64 // random per Open: tells a restarted process from the previous one

	pool     rpcPool
	rpcConns connSet

	lead    atomic.Pointer[leaderState] // non-nil while this node leads
	verify  verifier
	reads   readBatch // a follower's linearizable reads share forwarded read indexes
	contact contact
	members atomic.Pointer[[]Member]
	// seenCerts: the certificates each peer showed, which RetireServer revokes.
	seenCerts seenCerts
	// formatLimit is the newest command format every voter can apply, as the embedding
	// agent last learned from gossip (SetCommandFormatLimit); the leader proposes
	// nothing newer.
	formatLimit atomic.Uint32
	peerFormats peerFormats // what each voter answered over RPC (formats.go)
	oldLeaders  sync.Map    // leader address -> when it refused rpcApplyLeases (apply.go)
	// leaderHandler serves CallLeader on this node while it leads (leadercall.go).
	leaderHandler leaderHandlerSlot
	// callerChecker checks forwarded writes that carry a caller (caller.go), and
	// noCallerLeaders are the leaders that refused rpcApplyAs (address -> when).
	callerChecker   callerCheckerSlot
	noCallerLeaders sync.Map

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeMu sync.Mutex
	closed  bool

	// logFailed receives the log store's failure (once): the node has stopped.
	logFailed chan error

	// counts and peerContact are read by Counters and PeerContact (metrics.go).
	counts struct {
		leaderChanges atomic.Uint64
		pending       atomic.Int64
		failed        atomic.Uint64
	}
	peerContact sync.Map // server ID → time.Time (timedTransport)
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
	n := &Node{cfg: cfg, log: cfg.Logger, store: store, fsm: newFSMAdapter(store, cfg.Logger.Named("fsm"), cfg.Observer), addr: advertise,
		ctx: nctx, cancel: cancel, logFailed: make(chan error, 1)}
	n.verify.n = n
	n.reads.fetch = n.forwardReadIndex
	n.mark.dataDir = cfg.DataDir
	if n.rejoin, err = readRejoin(cfg.DataDir); err != nil {
		ln.Close()
		cancel()
		return nil, err
	}
	n.formatLimit.Store(uint32(fsm.MaxCommandFormat))
	n.peerFormats.limit.Store(uint32(fsm.MaxCommandFormat))
	var nb [8]byte
	rand.Read(nb[:])
	n.nonce = binary.BigEndian.Uint64(nb[:]) | 1
	n.members.Store(&[]Member{})
	var src net.IP // nil: the kernel's choice
	if cfg.SourceIP != "" {
		src = net.ParseIP(cfg.SourceIP)
	}
	n.mux = newMux(ln, adv, n.serveRPC, src, cfg.TLS, n.memberAt, n)
	n.pool.mux = n.mux
	if err := n.start(ctx, dir); err != nil {
		n.shutdown() // the one path that unwinds a partial start: it checks every part
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context, dir string) error {
	cfg := n.cfg
	if err := checkStableStorePresent(dir); err != nil {
		return err
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("raft: open log store: %w", err)
	}
	n.bolt = bolt
	wopts := wal.Options{Logger: n.log.Named("wal"), OnFail: n.logStoreFailed, OnSync: cfg.Observer.WALSynced}
	if cfg.LogFaults != "" {
		wopts.FS = wal.FaultFS{Control: cfg.LogFaults}
		n.log.Warn("fault injection on the raft log is on (tests only)", "control", cfg.LogFaults)
	}
	if cfg.wrapLogFS != nil {
		if wopts.FS == nil {
			wopts.FS = wal.OSFS{}
		}
		wopts.FS = cfg.wrapLogFS(wopts.FS)
	}
	w, err := openLogStore(dir, bolt, wopts)
	if err != nil {
		return fmt.Errorf("raft: open log: %w", err)
	}
	n.wal = w
	var store hraft.LogStore = markingLogs{LogStore: w, m: &n.mark}
	if cfg.wrapLogStore != nil {
		store = cfg.wrapLogStore(store)
	}
	logs, err := hraft.NewLogCache(512, store)
	if err != nil {
		return err
	}
	files, err := hraft.NewFileSnapshotStoreWithLogger(dir, 2, n.log.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("raft: snapshot store: %w", err)
	}
	// Part of the state lost (statecheck.go) refuses here, before raft starts on it.
	if err := checkStateParts(dir, bolt, w, files); err != nil {
		return err
	}
	if err := markLogInWAL(bolt); err != nil {
		return err
	}
	snaps := recordingSnapshots{SnapshotStore: files, bolt: bolt}
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
	if err := n.checkState(existing); err != nil {
		return err
	}
	r, err := hraft.NewRaft(rc, n.fsm, logs, markingStable{StableStore: bolt, m: &n.mark}, snapshotStore{snaps},
		timedTransport{NetworkTransport: n.trans, obs: cfg.Observer, contact: &n.peerContact})
	if err != nil {
		return fmt.Errorf("raft: start: %w", err)
	}
	n.raft = r
	n.existing = existing
	n.mux.start() // routed connections use n.raft
	switch {
	case n.rejoin != nil:
		n.startRejoin(existing)
	case existing:
		n.log.Info("recovered raft state", "applied", n.store.AppliedIndex())
	case cfg.Bootstrap:
		boot := hraft.Configuration{Servers: []hraft.Server{{
			Suffrage: hraft.Voter, ID: hraft.ServerID(cfg.NodeID), Address: hraft.ServerAddress(n.addr)}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, hraft.ErrCantBootstrap) {
			return fmt.Errorf("raft: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new cluster")
	case len(cfg.Join) > 0:
		n.wg.Add(1)
		go n.joinLoop()
	default:
		n.log.Info("no raft state and neither bootstrap nor join: waiting to be added by a member (or for gossip to bootstrap)")
	}
	n.wg.Add(3)
	go n.leaderLoop()
	go n.membersLoop()
	go n.contactLoop()
	if !cfg.FormatsFromGossip {
		n.wg.Add(1)
		go n.formatsLoop()
	}
	return nil
}

// Addr is the advertised Raft address (the bound one when BindAddr had port 0).
func (n *Node) Addr() string { return n.addr }

// Raft exposes hashicorp/raft to tests and operator code.
func (n *Node) Raft() *hraft.Raft { return n.raft }

// Store is the replicated state machine.
func (n *Node) Store() *fsm.Store { return n.store }

// logStoreFailed runs when the log store fails for good (a failed fdatasync, a failed
// truncation): nothing this node writes can be trusted to be on disk any more, so it
// must not acknowledge another entry. It hands leadership over if it leads (reads of
// the log still work, and the others hold every committed entry) and stops; the
// embedding agent sees LogFailed and exits, and a restart re-reads what is on disk.
func (n *Node) logStoreFailed(err error) {
	n.log.Error("raft log store failed: stepping down and stopping this node", "error", err)
	select {
	case n.logFailed <- err:
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cerr := n.Close(ctx); cerr != nil {
		n.log.Warn("stopping after the log store failed", "error", cerr)
	}
}

// LogFailed delivers the log store's failure, after which the node has stopped
// writing and stepped down. The process should exit: only a restart, which re-reads
// the log from disk, can tell what is durable.
func (n *Node) LogFailed() <-chan error { return n.logFailed }

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

// shutdown stops everything without handing leadership over (a crash, for tests). It
// also unwinds a start that failed part way: every part is checked for nil.
func (n *Node) shutdown() error {
	n.closed = true
	n.cancel()
	var err error
	if n.raft != nil {
		err = n.raft.Shutdown().Error()
	}
	n.pool.close()
	n.rpcConns.CloseAll()
	if n.trans != nil {
		n.trans.Close()
	}
	n.mux.Close()
	n.wg.Wait()
	if n.wal != nil {
		if cerr := n.wal.Close(); err == nil {
			err = cerr
		}
	}
	if n.bolt != nil {
		if cerr := n.bolt.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
