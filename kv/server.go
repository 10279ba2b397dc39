package kv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/internal/ctoken"
	"github.com/keel-kv/keel/kv/lease"
	"golang.org/x/net/http2"
	//lint:ignore SA1019 http.Server.Protocols peeks for the preface before HTTP/1 parsing (see Serve)
	"golang.org/x/net/http2/h2c"
)

// Server serves the HTTP API of one node. Its handlers are safe for concurrent use; it
// keeps no per-client state, so any node can serve any request.
type Server struct {
	cfg     Config
	lim     limits
	store   Store
	log     hclog.Logger
	mux     *http.ServeMux
	handler http.Handler

	// codec signs continue tokens; nil until the cluster secret is known (it never
	// changes afterwards, so it is loaded once and kept).
	codec atomic.Pointer[ctoken.Codec]

	// resources serves /apis; nil until SetResources (no schema: /apis is empty).
	resources atomic.Pointer[Resources]
	// objects is the typed layer the /apis routes call; nil until SetObjectAPI.
	objects atomic.Pointer[ObjectAPI]
	// operator does the node's operator actions (operator.go); nil until SetOperator.
	operator atomic.Pointer[Operator]

	ready struct {
		sync.Mutex
		checks []readyCheck
	}

	http struct {
		sync.Mutex
		srv    *http.Server
		closed bool
	}

	// streamDoor serves the connections upgraded from GET /v1/stream (upgrade.go);
	// nil until SetStreamDoor.
	streamDoor atomic.Pointer[StreamDoor]

	// watches counts the watches being served; watchStop is closed by Shutdown to end
	// them (the HTTP server waits for every handler, a watch never ends by itself).
	watches atomic.Int64
	// watchSlots counts the watches of each token (watchlimits.go).
	watchSlots watchSlots
	// leaseOwners counts each token's leases granted through this node (leaselimits.go).
	leaseOwners leaseOwners
	// guards caches the typed resources' key ranges of the current schema (acl_resources.go).
	guards atomic.Pointer[guardCache]
	// conns and inFlight count open client connections and running requests
	// (connlimits.go).
	conns atomic.Int64
	// connClients counts open client connections per source address, across doors.
	connClients clientConns
	inFlight    atomic.Int64
	// clientInFlight counts the requests in flight per source address.
	clientInFlight clientConns
	watchStop      chan struct{}
	stopOnce       sync.Once

	// acl is the node's view of the ACL records (acl.go); nil until first read.
	// aclRefresh is when an unknown token last made it re-read them at the leader.
	acl        atomic.Pointer[acl.State]
	aclRefresh atomic.Int64
	// aclConfirmed: acl has been read at the leader once (authenticate).
	aclConfirmed atomic.Bool
	aclDone      chan struct{} // closed when aclLoop returns; nil when it never ran

	// patterns are the registered route patterns (Routes).
	routesMu sync.Mutex
	patterns []string

	// skipLocalTxnCheck (tests only) skips checkTxn on the node that takes a KV API
	// transaction, so a test can show the leader's own check (forwarded.go).
	skipLocalTxnCheck bool

	// lessor keeps lease deadlines while this node leads (kv/lease); its loop runs
	// from Serve to Shutdown.
	lessor *lease.Lessor
}

// readyCheck is an extra condition of /readyz added by the node that embeds the server.
type readyCheck struct {
	name  string
	check func(context.Context) error
}

// NewServer validates cfg and returns a server over store. A nil logger logs nothing.
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
	s := &Server{cfg: cfg, lim: cfg.limits(), store: store, log: logger, mux: http.NewServeMux(),
		watchStop: make(chan struct{})}
	s.lessor = lease.New(store, logger.Named("lessor"))
	if lc, ok := store.(lease.LeaderCaller); ok {
		lc.SetLeaderHandler(s.lessor.HandleLeaderCall)
	}
	if cs, ok := store.(CallerCheckSetter); ok {
		cs.SetCallerChecker(s.checkForwarded)
	}
	s.routes()
	// The chain, outside in: access log, client certificate, in-flight limit, routes.
	// An authentication middleware belongs next to requireClientCert.
	s.handler = s.accessLog(s.requireClientCert(s.limitInFlight(s.mux)))
	return s, nil
}

// Handler returns the server's HTTP handler (routes, JSON errors, access log).
func (s *Server) Handler() http.Handler { return s.handler }

// Handle registers an extra route on the server's mux (for example /metrics) with a
// Go 1.22 ServeMux pattern; it panics on a pattern conflict, like ServeMux.Handle.
// Register before serving.
// The pattern must have an access rule (acl_routes.go) or the route answers 403.
func (s *Server) Handle(pattern string, h http.Handler) { s.register(pattern, h, false) }

// AddReadyCheck adds a condition that /readyz requires; check returns nil when ready
// or an error saying why not. Safe to call while serving.
func (s *Server) AddReadyCheck(name string, check func(context.Context) error) {
	s.ready.Lock()
	defer s.ready.Unlock()
	s.ready.checks = append(s.ready.checks, readyCheck{name: name, check: check})
}

// Serve serves HTTP on ln until Shutdown; it returns nil after Shutdown and the
// listener's error otherwise. Call it at most once.
func (s *Server) Serve(ln net.Listener) error {
	s.http.Lock()
	if s.http.closed || s.http.srv != nil {
		s.http.Unlock()
		ln.Close()
		return errors.New("kv: Serve called after Shutdown or twice")
	}
	srv := &http.Server{
		// HTTP/1.1, and HTTP/2 over cleartext TCP for clients that start with its
		// preface (prior knowledge: gRPC-style clients, curl --http2-prior-knowledge,
		// Go's Transport with Protocols.SetUnencryptedHTTP2): many requests in flight
		// on one connection. x/net's h2c handler rather than http.Server.Protocols:
		// the latter peeks 14 bytes for the preface before parsing HTTP/1, so a
		// shorter garbage request would wait for the header timeout instead of a 400.
		//lint:ignore SA1019 see above
		Handler:           h2c.NewHandler(s.handler, &http2.Server{}),
		MaxHeaderBytes:    http.DefaultMaxHeaderBytes,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		ConnContext:       tlsConnContext,
	}
	s.http.srv = srv
	s.lessor.Start()
	s.aclDone = make(chan struct{})
	go func() {
		defer close(s.aclDone)
		s.aclLoop(s.watchStop)
	}()
	s.http.Unlock()
	s.log.Info("serving HTTP", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil)
	// net/http's own error answers (431, 400, 501) become JSON (rawerrors.go).
	if s.cfg.TLS != nil {
		ln = tlsListener{Listener: ln, cfg: s.cfg.TLS}
	}
	ln = s.LimitListener(ln)
	ln = jsonErrorListener{Listener: ln, maxHeaderBytes: srv.MaxHeaderBytes}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("kv: serve: %w", err)
	}
	return nil
}

// Shutdown stops accepting connections and waits for in-flight requests until ctx is
// done (then it closes the remaining connections and returns ctx's error).
func (s *Server) Shutdown(ctx context.Context) error {
	s.http.Lock()
	s.http.closed = true
	srv := s.http.srv
	aclDone := s.aclDone
	s.http.Unlock()
	s.stopOnce.Do(func() {
		close(s.watchStop)
		s.lessor.Stop()
	})
	if aclDone != nil {
		<-aclDone
	}
	if srv == nil {
		s.closeStreams(ctx)
		return nil
	}
	err := srv.Shutdown(ctx)
	if serr := s.closeStreams(ctx); err == nil {
		err = serr
	}
	if err != nil {
		srv.Close()
		return fmt.Errorf("kv: shutdown: %w", err)
	}
	return nil
}

// requestContext bounds the store work of one request by RequestTimeout.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
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
