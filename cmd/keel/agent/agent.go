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

	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/internal/logging"
	"github.com/keel-kv/keel/internal/tracing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/tlsutil"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/etcdv3"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/stream"
	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// Agent is one running keel node. It owns the raft node, the HTTP server and the
// goroutine serving it; Close stops them in order.
type Agent struct {
	cfg   Config
	log   hclog.Logger
	store *fsm.Store
	// compactor reclaims the store's compacted history (local work, not replicated).
	compactor *fsm.Compactor
	node      *raft.Node
	server    *kv.Server // the service core
	httpd     *httpapi.Server
	ln        net.Listener
	// etcd serves the etcd v3 API on etcdLn; nil when Config.EtcdAddr is empty.
	etcd    *etcdv3.Server
	etcdLn  net.Listener
	etcdErr chan error
	// etcdReady is closed by publishEtcdURLLoop: the etcd door's etcdv3.Server.Ready.
	etcdReady chan struct{}
	gossip    *gossip           // nil when gossip is off
	tls       *tlsutil.Reloader // nil without TLS
	// versions is the storage-version manager; nil without a schema.
	versions *versions.Manager
	// migrator rewrites old-version objects while this node leads; nil without a
	// schema.
	migrator *migrate.Migrator
	// versionsMetrics is versions for the metrics collector, which may scrape before
	// startVersions has run.
	versionsMetrics atomic.Pointer[versions.Manager]
	schemaMu        sync.Mutex // serializes ApplySchema
	incarnation     uint64     // random per start; in gossip metadata and StorageVersion entries

	// metrics is the node's replication and storage metrics (metrics_node.go), made
	// before raft starts (it observes raft); metricsReg is /metrics' registry.
	metrics     *nodeMetrics
	metricsReg  *prometheus.Registry
	stopTracing func(context.Context) error
	// stopLoops ends the agent's own goroutines (mintSecretLoop); loops waits for them.
	stopLoops context.CancelFunc
	loops     sync.WaitGroup
	left      chan struct{}
	leaveOnce sync.Once

	serveErr chan error
	serving  bool // Serve owns ln (and closes it)
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
	// Every component's lines carry node and component, and raft's routine events
	// stay out of ERROR (internal/logging).
	log = logging.Filter(log)
	tlsr, err := loadTLS(&cfg)
	if err != nil {
		return nil, err
	}
	if err := checkTLSIdentity(tlsr, cfg.NodeID, cfg.TLS.CertFile); err != nil {
		return nil, err // before the data dir is touched
	}
	id, err := loadOrCreateNodeID(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	if err := checkTLSIdentity(tlsr, id, cfg.TLS.CertFile); err != nil {
		return nil, err
	}
	restrictUmask()
	if n, err := privatizeDataDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("agent: make the data dir private: %w", err)
	} else if n > 0 {
		log.Warn("narrowed permissions in the data dir to 0700/0600", "dir", cfg.DataDir, "entries", n)
	}
	cfg.NodeID = id
	cfg.Raft.NodeID = id
	cfg.Raft.DataDir = cfg.DataDir
	log = log.With("node", id, "component", "agent") // Named loggers replace component

	a := &Agent{cfg: cfg, log: log, serveErr: make(chan error, 1), left: make(chan struct{}),
		incarnation: membership.NewIncarnation(), tls: tlsr}
	if cfg.Insecure {
		log.Warn("INSECURE: no TLS (-insecure or -dev): every port is plain text and unauthenticated; anyone who reaches them can read and change all data")
	}
	if cfg.OTLPEndpoint != "" {
		if a.stopTracing, err = tracing.Setup(cfg.OTLPEndpoint, id, buildinfo.Version()); err != nil {
			return nil, err
		}
	}
	if err := a.start(ctx); err != nil {
		// One path unwinds any partial start: Close checks every part.
		a.Close(ctx)
		return nil, err
	}
	log.Info("keel agent started", "http", a.HTTPAddr(), "raft", cfg.Raft.BindAddr, "data_dir", cfg.DataDir,
		"tls", tlsr != nil, "insecure", cfg.Insecure)
	return a, nil
}

// start opens the parts in order, each into its field as soon as it exists, so that
// Close can stop whatever a failed start left behind.
func (a *Agent) start(ctx context.Context) error {
	cfg := a.cfg
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen http %s: %w", cfg.HTTPAddr, err)
	}
	a.ln = ln
	a.store = fsm.NewStore()
	rcfg := cfg.Raft
	rcfg.Logger = a.log.Named("raft")
	rcfg.FormatsFromGossip = cfg.Gossip != nil
	a.metrics = newNodeMetrics(a, cfg.EtcdAddr != "")
	rcfg.Observer = a.metrics
	if a.tls != nil { // a nil *Reloader in the interface would not be nil
		rcfg.TLS = a.tls
	}
	if len(rcfg.Join) > 0 {
		rcfg.Join = resolveJoin(ctx, rcfg.Join, a.clientTLS(), a.log)
	}
	if a.node, err = raft.Open(ctx, rcfg, a.store); err != nil {
		return fmt.Errorf("open raft: %w", withRebuildAdvice(cfg.DataDir, err))
	}
	a.compactor = fsm.StartCompactor(a.store)
	kcfg := cfg.KV
	kcfg.Addr = ln.Addr().String()
	kcfg.Insecure = cfg.Insecure
	if a.tls != nil {
		kcfg.TLS = a.tls.HTTPServerConfig(cfg.VerifyClients)
		kcfg.RequireClientCert = cfg.VerifyClients
	}
	if a.server, err = kv.NewServer(kcfg, a.node, a.log.Named("http")); err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	a.httpd = httpapi.New(a.server)
	stream.Attach(a.httpd)
	if cfg.MaxCommandFormat > 0 {
		// Simulates a node of an older release: it announces only the formats it applies.
		a.node.SetCommandFormatLimit(byte(cfg.MaxCommandFormat))
	}
	a.server.SetOperator(a)
	a.registerOperatorRoutes()
	if err := a.enableMetrics(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	a.serving = true
	go func() { a.serveErr <- a.httpd.Serve(ln) }()
	if err := a.startEtcd(); err != nil {
		return err
	}
	if cfg.Gossip != nil {
		if err := a.startGossip(ctx); err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
	}
	if err := a.startVersions(ctx); err != nil {
		return fmt.Errorf("storage versions: %w", err)
	}
	lctx, stopLoops := context.WithCancel(context.Background())
	a.stopLoops = stopLoops
	a.loops.Add(1)
	go func() {
		defer a.loops.Done()
		a.mintSecretLoop(lctx)
	}()
	if a.etcd != nil {
		a.loops.Add(1)
		go func() {
			defer a.loops.Done()
			a.publishEtcdURLLoop(lctx)
		}()
	}
	if a.gossip != nil && a.versions != nil {
		a.loops.Add(1)
		go func() {
			defer a.loops.Done()
			a.announceKeyPhasesLoop(lctx)
		}()
	}
	return nil
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
// It is safe to call more than once, and on an agent whose start failed part way: it
// stops exactly the parts that were started (Start relies on it).
func (a *Agent) Close(ctx context.Context) error {
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	if a.stopLoops != nil {
		a.stopLoops()
		a.loops.Wait()
	}
	var errs []error
	if a.migrator != nil {
		a.migrator.Close()
	}
	if a.stopTracing != nil {
		if err := a.stopTracing(ctx); err != nil {
			a.log.Warn("flushing spans", "error", err)
		}
	}
	if a.versions != nil {
		a.versions.Close()
	}
	if a.gossip != nil {
		a.gossip.stopLoop()
	}
	if a.etcd != nil {
		a.etcd.Stop(ctx)
		if err := <-a.etcdErr; err != nil {
			errs = append(errs, fmt.Errorf("etcd API: %w", err))
		}
	} else if a.etcdLn != nil {
		a.etcdLn.Close()
	}
	if a.httpd != nil {
		if err := a.httpd.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown http: %w", err))
		}
	}
	if !a.serving && a.ln != nil {
		a.ln.Close() // Serve never took it over
	}
	if a.node != nil {
		if err := a.node.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close raft: %w", err))
		}
	}
	a.compactor.Close()
	if a.gossip != nil {
		if err := a.gossip.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close gossip: %w", err))
		}
	}
	a.log.Info("keel agent stopped")
	return errors.Join(errs...)
}
