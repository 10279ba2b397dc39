// Package agent wires one keel node together: the state machine (fsm), its replication
// (raft) and the HTTP API (kv). cmd/keel runs it; end-to-end tests start several in one
// process on loopback.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// Agent is one running keel node. It owns the raft node, the HTTP server and the
// goroutine serving it; Close stops them in order.
type Agent struct {
	cfg    Config
	log    hclog.Logger
	store  *fsm.Store
	node   *raft.Node
	server *kv.Server
	ln     net.Listener
	gossip *gossip // nil when gossip is off
	// versions is the storage-version manager; nil without a schema.
	versions *versions.Manager
	// migrator rewrites old-version objects while this node leads; nil without a
	// schema or with NoMigrate.
	migrator *migrate.Migrator
	// versionsMetrics is versions for the metrics collector, which may scrape before
	// startVersions has run.
	versionsMetrics atomic.Pointer[versions.Manager]
	incarnation     uint64 // random per start; in gossip metadata and StorageVersion entries

	stopMetrics func()
	left        chan struct{}
	leaveOnce   sync.Once

	serveErr chan error
	closeMu  sync.Mutex
	closed   bool
}

// Start opens the data directory, starts raft (bootstrapping or joining as configured)
// and serves HTTP. It returns once the HTTP listener is bound; leadership and the
// cluster secret may come later (/readyz says when).
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	id, err := loadOrCreateNodeID(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	cfg.NodeID = id
	cfg.Raft.NodeID = id
	cfg.Raft.DataDir = cfg.DataDir
	log = log.With("node", id)

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen http %s: %w", cfg.HTTPAddr, err)
	}
	store := fsm.NewStore()
	rcfg := cfg.Raft
	rcfg.Logger = log.Named("raft")
	node, err := raft.Open(ctx, rcfg, store)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("open raft: %w", err)
	}
	kcfg := cfg.KV
	kcfg.Addr = ln.Addr().String()
	server, err := kv.NewServer(kcfg, node, log.Named("http"))
	if err != nil {
		ln.Close()
		node.Close(ctx)
		return nil, fmt.Errorf("http server: %w", err)
	}
	a := &Agent{cfg: cfg, log: log, store: store, node: node, server: server, ln: ln, serveErr: make(chan error, 1),
		left: make(chan struct{})}
	a.incarnation = membership.NewIncarnation()
	if cfg.MaxCommandFormat > 0 {
		// Simulates a node of an older release: it announces only the formats it applies.
		node.SetCommandFormatLimit(byte(cfg.MaxCommandFormat))
	}
	a.registerOperatorRoutes()
	if err := a.enableMetrics(); err != nil {
		ln.Close()
		node.Close(ctx)
		return nil, fmt.Errorf("metrics: %w", err)
	}
	go func() { a.serveErr <- server.Serve(ln) }()
	if cfg.Gossip != nil {
		if err := a.startGossip(ctx); err != nil {
			server.Shutdown(ctx)
			node.Close(ctx)
			return nil, fmt.Errorf("gossip: %w", err)
		}
	}
	if err := a.startVersions(ctx); err != nil {
		a.Close(ctx)
		return nil, fmt.Errorf("storage versions: %w", err)
	}
	log.Info("keel agent started", "http", ln.Addr().String(), "raft", rcfg.BindAddr, "data_dir", cfg.DataDir)
	return a, nil
}

// NodeID is this node's stable identity (persisted in the data directory).
func (a *Agent) NodeID() string { return a.cfg.NodeID }

// HTTPAddr is the address the HTTP API listens on (resolved when the config said :0).
func (a *Agent) HTTPAddr() string { return a.ln.Addr().String() }

// RaftAddr is the address other nodes use for Raft and forwarding.
func (a *Agent) RaftAddr() string {
	if a.cfg.Raft.AdvertiseAddr != "" {
		return a.cfg.Raft.AdvertiseAddr
	}
	return a.cfg.Raft.BindAddr
}

// Node exposes the raft node to tests and operator commands.
func (a *Agent) Node() *raft.Node { return a.node }

// Store exposes the local state machine (read-only use: View, Hash).
func (a *Agent) Store() *fsm.Store { return a.store }

// Done reports the HTTP server's exit error (nil after a clean Close).
func (a *Agent) Done() <-chan error { return a.serveErr }

// Close stops serving HTTP, hands leadership over if this node leads, and shuts raft down.
// It is safe to call more than once.
func (a *Agent) Close(ctx context.Context) error {
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	if a.stopMetrics != nil {
		a.stopMetrics()
	}
	var errs []error
	if a.migrator != nil {
		a.migrator.Close()
	}
	if a.versions != nil {
		a.versions.Close()
	}
	if a.gossip != nil {
		a.gossip.stopLoop()
	}
	if err := a.server.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown http: %w", err))
	}
	if err := a.node.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close raft: %w", err))
	}
	if a.gossip != nil {
		if err := a.gossip.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close gossip: %w", err))
		}
	}
	a.log.Info("keel agent stopped")
	return errors.Join(errs...)
}
