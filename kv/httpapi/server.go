package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/net/http2"

	//lint:ignore SA1019 http.Server.Protocols peeks for the preface before HTTP/1 parsing (see Serve)
	"golang.org/x/net/http2/h2c"

	"github.com/keel-kv/keel/kv"
)

// Server is the HTTP door of one node: it decodes HTTP/JSON requests, calls the service
// core (a *kv.Server) and encodes its answers. Its handlers are safe for concurrent use.
type Server struct {
	core    *kv.Server
	cfg     kv.Config
	log     hclog.Logger
	mux     *http.ServeMux
	handler http.Handler

	http struct {
		sync.Mutex
		srv    *http.Server
		closed bool
	}

	// streamDoor serves the connections upgraded from GET /v1/stream (upgrade.go);
	// nil until SetStreamDoor.
	streamDoor atomic.Pointer[StreamDoor]

	// patterns are the registered route patterns (Routes).
	routesMu sync.Mutex
	patterns []string
}

// New returns the HTTP door over core, its routes registered.
func New(core *kv.Server) *Server {
	s := &Server{core: core, cfg: core.Config(), log: core.Logger(), mux: http.NewServeMux()}
	s.routes()
	// The chain, outside in: access log, h2c stream budget, client certificate,
	// in-flight limit, routes. An authentication middleware belongs next to
	// requireClientCert.
	s.handler = s.accessLog(s.countStream(s.requireClientCert(s.limitInFlight(s.mux))))
	return s
}

// Core is the service core the door serves.
func (s *Server) Core() *kv.Server { return s.core }

// Handler returns the server's HTTP handler (routes, JSON errors, access log).
func (s *Server) Handler() http.Handler { return s.handler }

// Handle registers an extra route on the server's mux (for example /metrics) with a
// Go 1.22 ServeMux pattern; it panics on a pattern conflict, like ServeMux.Handle.
// Register before serving.
// The pattern must have an access rule (acl_routes.go) or the route answers 403.
func (s *Server) Handle(pattern string, h http.Handler) { s.register(pattern, h, false) }

// Serve serves HTTP on ln until Shutdown; it returns nil after Shutdown and the
// listener's error otherwise. Call it at most once. It starts the core's loops
// (kv.Server.Start).
func (s *Server) Serve(ln net.Listener) error {
	s.http.Lock()
	if s.http.closed || s.http.srv != nil {
		s.http.Unlock()
		ln.Close()
		return errors.New("httpapi: Serve called after Shutdown or twice")
	}
	srv := &http.Server{
		// HTTP/1.1, and HTTP/2 over cleartext TCP for clients that start with its
		// preface (prior knowledge: gRPC-style clients, curl --http2-prior-knowledge,
		// Go's Transport with Protocols.SetUnencryptedHTTP2): many requests in flight
		// on one connection. x/net's h2c handler rather than http.Server.Protocols:
		// the latter peeks 14 bytes for the preface before parsing HTTP/1, so a
		// shorter garbage request would wait for the header timeout instead of a 400.
		//lint:ignore SA1019 see above
		Handler: h2c.NewHandler(s.handler, &http2.Server{}),
		// The etcd door's HTTP/2 numbers (kv/etcdv3/bounds.go), which x/net's h2c
		// server takes from here: MaxStreamInFlight streams on one connection (x/net's
		// default is 250), kv.MaxHeaderListBytes of headers (1 MiB; HTTP/1.1's too) and
		// kv.MaxHTTP2FrameBytes frames (1 MiB). Each stream also counts against its
		// client's connections-and-streams budget (countStream).
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: s.cfg.MaxStreamInFlight,
			MaxReadFrameSize:     kv.MaxHTTP2FrameBytes,
		},
		MaxHeaderBytes:    kv.MaxHeaderListBytes,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		ConnContext:       tlsConnContext,
	}
	s.http.srv = srv
	s.core.Start()
	s.http.Unlock()
	s.log.Info("serving HTTP", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil)
	// net/http's own error answers (431, 400, 501) become JSON (rawerrors.go).
	if s.cfg.TLS != nil {
		ln = tlsListener{Listener: ln, cfg: s.cfg.TLS}
	}
	ln = s.core.LimitListener(ln)
	ln = jsonErrorListener{Listener: ln, maxHeaderBytes: srv.MaxHeaderBytes}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("httpapi: serve: %w", err)
	}
	return nil
}

// Shutdown stops the core (every watch and stream ends), stops accepting connections
// and waits for in-flight requests until ctx is done (then it closes the remaining
// connections and returns ctx's error).
func (s *Server) Shutdown(ctx context.Context) error {
	s.http.Lock()
	s.http.closed = true
	srv := s.http.srv
	s.http.Unlock()
	s.core.Stop()
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
		return fmt.Errorf("httpapi: shutdown: %w", err)
	}
	return nil
}

// requestContext bounds the store work of one request by RequestTimeout.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return s.core.RequestContext(r.Context())
}
