package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/internal/ctoken"
	"github.com/keel-kv/keel/kv/lease"
)

// Server is the service core of one node: the operations keel offers (core*.go), over
// a Store. Its methods are safe for concurrent use; it keeps no per-client state, so
// any node can serve any request. The doors (kv/httpapi, kv/stream, kv/etcdv3) call
// it; it knows none of their protocols.
type Server struct {
	cfg   Config
	lim   limits
	store Store
	log   hclog.Logger

	// codec signs continue tokens; nil until the cluster secret is known (it never
	// changes afterwards, so it is loaded once and kept).
	codec atomic.Pointer[ctoken.Codec]

	// resources is the node's storage-version manager; nil until SetResources (no
	// schema: no typed resources).
	resources atomic.Pointer[Resources]
	// objects is the typed layer (kv/resources); nil until SetObjectAPI.
	objects atomic.Pointer[ObjectAPI]
	// operator does the node's operator actions (operator.go); nil until SetOperator.
	operator atomic.Pointer[Operator]

	ready struct {
		sync.Mutex
		checks []readyCheck
	}

	// watches counts the watches being served; watchStop is closed by Stop to end
	// them (a door waits for its handlers, and a watch never ends by itself).
	watches atomic.Int64
	// watchSlots counts the watches of each token (watchlimits.go).
	watchSlots watchSlots
	// leaseOwners counts each token's leases granted through this node (leaselimits.go).
	leaseOwners leaseOwners
	// guards caches the typed resources' key ranges of the current schema (acl_resources.go).
	guards atomic.Pointer[guardCache]
	// conns and inFlight count open client connections and running requests
	// (connlimits.go), across doors.
	conns atomic.Int64
	// connClients counts open client connections per source address, across doors.
	connClients clientConns
	inFlight    atomic.Int64
	// clientInFlight counts the requests in flight per source address.
	clientInFlight clientConns
	// requestBytes counts the bytes of request bodies in flight (bytelimits.go).
	requestBytes requestBytes
	watchStop    chan struct{}
	startOnce    sync.Once
	stopOnce     sync.Once

	// acl is the node's view of the ACL records (acl.go); nil until first read.
	// aclRefresh is when an unknown token last made it re-read them at the leader.
	acl        atomic.Pointer[acl.State]
	aclRefresh atomic.Int64
	// aclConfirmed: acl has been read at the leader once (authenticate).
	aclConfirmed atomic.Bool
	aclDone      chan struct{} // closed when aclLoop returns; nil when it never ran

	// skipLocalTxnCheck (tests only) skips checkTxn on the node that takes a KV API
	// transaction, so a test can show the leader's own check (forwarded.go).
	skipLocalTxnCheck bool

	// lessor keeps lease deadlines while this node leads (kv/lease); its loop runs
	// from Start to Stop.
	lessor *lease.Lessor

	// revoker is the store's list of revoked certificates (CheckClientCert); nil
	// without TLS or when the store keeps none.
	revoker CertRevoker
}

// readyCheck is an extra condition of readiness added by the node that embeds the core.
type readyCheck struct {
	name  string
	check func(context.Context) error
}

// NewServer validates cfg and returns the core over store. A nil logger logs nothing.
func NewServer(cfg Config, store Store, logger hclog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("kv: NewServer: nil store")
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Server{cfg: cfg, lim: cfg.limits(), store: store, log: logger, watchStop: make(chan struct{})}
	s.lessor = lease.New(store, logger.Named("lessor"))
	if lc, ok := store.(lease.LeaderCaller); ok {
		lc.SetLeaderHandler(s.lessor.HandleLeaderCall)
	}
	if cs, ok := store.(CallerCheckSetter); ok {
		cs.SetCallerChecker(s.checkForwarded)
	}
	if r, ok := store.(CertRevoker); ok && cfg.TLS != nil {
		s.revoker = r
	}
	return s, nil
}

// Start runs the core's loops: the lessor (deadlines while this node leads) and the
// ACL state's refresh. A door's Serve calls it; calls after the first, or after
// Stop, do nothing.
func (s *Server) Start() {
	s.startOnce.Do(func() {
		select {
		case <-s.watchStop:
			return // stopped before it started
		default:
		}
		s.lessor.Start()
		s.aclDone = make(chan struct{})
		go func() {
			defer close(s.aclDone)
			s.aclLoop(s.watchStop)
		}()
	})
}

// Stop ends every watch and long-lived stream (Stopping is closed) and the core's
// loops, and waits for them. A door's Shutdown calls it before it waits for its
// handlers; calls after the first do nothing.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.startOnce.Do(func() {}) // a Start after Stop runs nothing
		close(s.watchStop)
		s.lessor.Stop()
		if s.aclDone != nil {
			<-s.aclDone
		}
	})
}

// AddReadyCheck adds a condition readiness requires; check returns nil when ready or
// an error saying why not (a ReadyNote passes with a note). Safe to call while serving.
func (s *Server) AddReadyCheck(name string, check func(context.Context) error) {
	s.ready.Lock()
	defer s.ready.Unlock()
	s.ready.checks = append(s.ready.checks, readyCheck{name: name, check: check})
}

// tokenCodec returns the codec for continue tokens, waiting at most SecretWait for
// the replicated cluster secret the first time.
func (s *Server) tokenCodec(ctx context.Context) (*ctoken.Codec, error) {
	if c := s.codec.Load(); c != nil {
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SecretWait)
	defer cancel()
	secret, err := s.store.ClusterSecret(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster secret not available: %v", ErrNotReady, err)
	}
	if len(secret) == 0 {
		return nil, fmt.Errorf("%w: cluster secret is empty", ErrNotReady)
	}
	c := ctoken.NewCodec(secret)
	s.codec.Store(c)
	return c, nil
}
