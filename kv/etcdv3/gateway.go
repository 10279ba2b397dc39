package etcdv3

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	etcdgw "go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/keel-kv/keel/kv"
)

// The JSON gateway. etcd serves, on its client port beside gRPC, the grpc-gateway of
// its API (POST /v3/kv/range, /v3/watch, /v3/lease/..., /v3/auth/...) and GET
// /version and /health; Patroni's etcd3 backend, OpenStack's etcd3gw and curl
// scripts speak it. This door does too, as etcd does:
//
//   - one listener. Each connection is routed once, when it opens (route): a
//     plain one by its first bytes (HTTP/2's preface: gRPC; anything else: HTTP/1.1),
//     as etcd's cmux does; a TLS one by the protocol its handshake agreed (ALPN),
//     "http/1.1" when the client offers it (curl, urllib3, Go's http.Client), "h2"
//     when it offers only that (every gRPC client), its first bytes when it offers
//     neither. etcd routes TLS requests one by one on an http.Server (gRPC through
//     grpc.Server.ServeHTTP); this door keeps gRPC's own transport for gRPC clients
//     (its keepalive policy and stream limits, and its speed: etcd added
//     --listen-client-http-urls for that). The TLS handshake happens here, with the
//     door's TLS config, so both halves require client certificates alike; gRPC gets
//     the finished connection (handshaken).
//   - etcd's generated handlers (go.etcd.io/etcd/api/v3/etcdserverpb/gw) on a
//     grpc-gateway mux with etcd's marshaler options, calling this door's gRPC server
//     over an in-process connection: every gateway call is a gRPC call of this door,
//     through the same interceptors, so every right, limit and error mapping applies
//     once. The HTTP client's address and whether its certificate was verified travel
//     as metadata only this connection may carry (gatewayPeer).
//   - the token: etcd's gateway passes the Authorization header on as the
//     "authorization" metadata, which etcd reads when "token" is absent; admit does
//     the same.

// gatewayMeta* are the metadata keys by which the gateway's in-process connection
// tells the door who the HTTP client is. They are honoured only on that connection
// (gatewayPeer) and an HTTP client cannot set them (gatewayHeaderMatcher).
const (
	gatewayMetaPrefix   = "keel-gateway-"
	gatewayMetaAddr     = gatewayMetaPrefix + "peer"
	gatewayMetaVerified = gatewayMetaPrefix + "verified"
)

// http2Preface opens every HTTP/2 connection (gRPC's).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// routeTimeout bounds a connection's TLS handshake and first bytes.
const routeTimeout = 20 * time.Second

// gateway is the HTTP half of a serving door.
type gateway struct {
	ln     net.Listener
	grpcLn *chanListener // connections for the gRPC server
	httpLn *chanListener // connections for the HTTP server
	memLn  *chanListener // the gateway's in-process connections to the gRPC server
	http   *http.Server
	conn   *grpc.ClientConn
	tls    *tls.Config
}

// serve serves gRPC and HTTP on ln until Stop.
func (e *Server) serve(ln net.Listener) error {
	g := &gateway{ln: ln, grpcLn: newChanListener(ln.Addr()), httpLn: newChanListener(ln.Addr()),
		memLn: newChanListener(ln.Addr())}
	if cfg := e.core.Config().TLS; cfg != nil {
		g.tls = alpnConfig(cfg)
	}
	conn, err := grpc.NewClient("passthrough:///etcd-gateway",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, s := net.Pipe()
			if err := g.memLn.push(ctx, &routedConn{Conn: s, gateway: true}); err != nil {
				c.Close()
				s.Close()
				return nil, err
			}
			return c, nil
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
		grpc.WithChainStreamInterceptor(keepWatchOpen))
	if err != nil {
		return err
	}
	g.conn = conn
	mux, err := e.gatewayMux(conn)
	if err != nil {
		conn.Close()
		return err
	}
	g.http = &http.Server{
		Handler:           e.httpHandler(mux),
		ReadHeaderTimeout: time.Minute,
		// An idle keep-alive connection holds one of the port's connection slots.
		IdleTimeout: 5 * time.Minute,
		ErrorLog:    log.New(io.Discard, "", 0), // a client's error is not the server's
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if rc, ok := c.(*routedConn); ok && rc.tls != nil {
				return context.WithValue(ctx, tlsStateKey{}, rc.tls)
			}
			return ctx
		},
	}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		conn.Close()
		ln.Close()
		return nil
	}
	e.gw = g
	e.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(2)
	go func() { defer wg.Done(); e.grpc.Serve(g.grpcLn) }()
	go func() { defer wg.Done(); e.gwGRPC.Serve(g.memLn) }()
	wg.Add(1)
	go func() { defer wg.Done(); g.http.Serve(g.httpLn) }()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			e.mu.Lock()
			closed := e.closed
			e.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				// Each server's Serve returns once its listener is closed (their
				// connections live on until Stop), as gRPC's Serve(ln) did.
				g.grpcLn.Close()
				g.httpLn.Close()
				g.memLn.Close()
				return nil
			}
			// Out of descriptors, or a refused connection (the connection limits):
			// try again, as gRPC's and net/http's Serve do.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			e.core.Logger().Warn("etcd door: accept failed; retrying", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-e.stop:
			}
			continue
		}
		backoff = 0
		go g.route(c)
	}
}

// route hands c to the gRPC or the HTTP server (see the top of this file).
func (g *gateway) route(c net.Conn) {
	c.SetDeadline(time.Now().Add(routeTimeout))
	rc := &routedConn{Conn: c}
	if g.tls != nil {
		tc := tls.Server(c, g.tls)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return
		}
		st := tc.ConnectionState()
		rc = &routedConn{Conn: tc, tls: &st}
		switch st.NegotiatedProtocol {
		case "h2":
			g.hand(g.grpcLn, rc)
			return
		case "http/1.1":
			// net/http sets Request.TLS only for a *tls.Conn.
			tc.SetDeadline(time.Time{})
			if err := g.httpLn.push(context.Background(), tc); err != nil {
				tc.Close()
			}
			return
		}
	}
	isGRPC, err := rc.sniff()
	if err != nil {
		c.Close()
		return
	}
	if isGRPC {
		g.hand(g.grpcLn, rc)
	} else {
		g.hand(g.httpLn, rc)
	}
}

func (g *gateway) hand(l *chanListener, c *routedConn) {
	c.SetDeadline(time.Time{})
	if err := l.push(context.Background(), c); err != nil {
		c.Close()
	}
}

// stop ends the gateway: no more connections, HTTP requests in flight finish until
// ctx is done (a gateway stream ends with its gRPC stream, which Stop ends).
func (g *gateway) stop(ctx context.Context) {
	g.ln.Close()
	if err := g.http.Shutdown(ctx); err != nil {
		g.http.Close()
	}
	g.conn.Close()
}

// alpnConfig is cfg offering both protocols, HTTP/1.1 first: a client that offers it
// gets it, a gRPC client (which offers "h2" alone) gets "h2".
func alpnConfig(cfg *tls.Config) *tls.Config {
	protos := []string{"http/1.1", "h2"}
	c := cfg.Clone()
	c.NextProtos = protos
	if get := cfg.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			inner, err := get(hello)
			if err != nil || inner == nil {
				return inner, err
			}
			inner = inner.Clone()
			inner.NextProtos = protos
			return inner, nil
		}
	}
	return c
}

// routedConn is a connection routed to one of the servers: the bytes route read to
// decide are read again first; tls is its TLS state (nil for a plain one); gateway
// marks the gateway's in-process connections.
type routedConn struct {
	net.Conn
	pre     []byte
	tls     *tls.ConnectionState
	gateway bool
}

// sniff reads until the bytes read say whether the connection opens with HTTP/2's
// preface; they are kept to be read again. It stops at the first byte that differs,
// so an HTTP/1.1 request shorter than the preface is not waited on.
func (c *routedConn) sniff() (bool, error) {
	buf := make([]byte, len(http2Preface))
	n := 0
	for n < len(buf) {
		m, err := c.Conn.Read(buf[n:])
		n += m
		if !bytes.HasPrefix([]byte(http2Preface), buf[:n]) {
			c.pre = buf[:n]
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	c.pre = buf[:n]
	return true, nil
}

func (c *routedConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// handshaken is the gRPC server's transport credentials: route did the TLS
// handshake already, so it only reports its state (for the client-certificate rule),
// marks the gateway's in-process connections, and meters every other connection's
// request messages (msgbytes.go).
type handshaken struct{ meter func(net.Conn) net.Conn }

func (handshaken) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("etcdv3: server-side credentials")
}

func (h handshaken) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	switch rc := c.(type) {
	case *routedConn:
		if rc.gateway {
			return c, gatewayAuth{}, nil
		}
		if rc.tls != nil {
			return h.meter(c), credentials.TLSInfo{State: *rc.tls,
				CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
		}
	case *tls.Conn:
		return h.meter(c), credentials.TLSInfo{State: rc.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return h.meter(c), nil, nil
}

func (handshaken) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "keel"}
}
func (h handshaken) Clone() credentials.TransportCredentials { return h }
func (handshaken) OverrideServerName(string) error           { return nil }

// gatewayAuth marks a call that came through the gateway's in-process connection.
type gatewayAuth struct{}

func (gatewayAuth) AuthType() string { return "keel-gateway" }

// gatewayPeer is, for a call that came through the gateway, the HTTP client's
// address and whether it passed the core's client-certificate rule at its HTTP
// request; ok is false for any other call.
func gatewayPeer(ctx context.Context) (addr string, passed, ok bool) {
	p, _ := peer.FromContext(ctx)
	if p == nil {
		return "", false, false
	}
	if _, ok := p.AuthInfo.(gatewayAuth); !ok {
		return "", false, false
	}
	return firstIncoming(ctx, gatewayMetaAddr), firstIncoming(ctx, gatewayMetaVerified) == "true", true
}

// keepWatchOpen keeps a gateway watch open once its request body ends. The
// generated handler half-closes the gRPC stream then; etcd's Watch keeps watching
// after a half-close, this door's ends the stream, so the gateway does not pass the
// half-close on: the watch ends with the HTTP request.
func keepWatchOpen(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/etcdserverpb.Watch/Watch" {
		return s, err
	}
	return noHalfClose{s}, nil
}

type noHalfClose struct{ grpc.ClientStream }

func (noHalfClose) CloseSend() error { return nil }

type tlsStateKey struct{}

// gatewayMux is etcd's gateway: its generated handlers, with its marshaler options
// (server/embed/serve.go, registerGateway), calling the door over conn.
func (e *Server) gatewayMux(conn *grpc.ClientConn) (*runtime.ServeMux, error) {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, errorsBothWays{&runtime.HTTPBodyMarshaler{
			Marshaler: &runtime.JSONPb{
				MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
				UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
			},
		}}),
		runtime.WithIncomingHeaderMatcher(gatewayHeaderMatcher),
		runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
			// The core's client-certificate rule is asked here, of the HTTP client's
			// TLS session, once per request; the call carries the answer.
			passed := e.core.CheckClientCert(func() *tls.ConnectionState { return requestTLS(r) }) == nil
			return metadata.Pairs(gatewayMetaAddr, r.RemoteAddr, gatewayMetaVerified, boolString(passed))
		}),
	)
	ctx := context.Background()
	for _, register := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		etcdgw.RegisterKVHandler, etcdgw.RegisterWatchHandler, etcdgw.RegisterLeaseHandler,
		etcdgw.RegisterClusterHandler, etcdgw.RegisterMaintenanceHandler, etcdgw.RegisterAuthHandler,
	} {
		if err := register(ctx, mux, conn); err != nil {
			return nil, err
		}
	}
	return mux, nil
}

// errorsBothWays writes the gateway's errors as both generations of etcd's gateway
// did, one object that either kind of client reads: grpc-gateway v2's status (etcd
// 3.6 on: {"code","message"}, in a stream under "error"), plus what v1 wrote (etcd
// 3.4 and 3.5, which Patroni, etcd3gw and older scripts parse): the message again as
// "error" in a unary answer, and grpc_code, http_code and http_status in a stream's.
// Patroni reads a stream error without grpc_code as Unknown, which it does not retry:
// its leader demoted itself at the first "no leader" of a keel election.
type errorsBothWays struct{ *runtime.HTTPBodyMarshaler }

func (m errorsBothWays) Marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case *spb.Status: // a unary answer's error
		return m.withFields(v, func(b []byte) []byte { return appendField(b, "error", v.GetMessage()) })
	case map[string]proto.Message: // a stream's error chunk: {"error": status}
		st, ok := v["error"].(*spb.Status)
		if !ok || len(v) != 1 {
			break
		}
		code := codes.Code(st.GetCode())
		httpCode := runtime.HTTPStatusFromCode(code)
		inner, err := m.withFields(st, func(b []byte) []byte {
			b = appendField(b, "grpc_code", int(code))
			b = appendField(b, "http_code", httpCode)
			return appendField(b, "http_status", http.StatusText(httpCode))
		})
		if err != nil {
			return nil, err
		}
		return append(append([]byte(`{"error":`), inner...), '}'), nil
	}
	return m.HTTPBodyMarshaler.Marshal(v)
}

// withFields is st as the JSON marshaler writes it, with the fields add appends
// (each followed by a comma) put first.
func (m errorsBothWays) withFields(st *spb.Status, add func([]byte) []byte) ([]byte, error) {
	b, err := m.HTTPBodyMarshaler.Marshal(st)
	if err != nil {
		return nil, err
	}
	rest := bytes.TrimSpace(b)
	if len(rest) < 2 || rest[0] != '{' {
		return b, nil // not an object: as it is
	}
	rest = bytes.TrimSpace(rest[1:])
	out := add([]byte{'{'})
	if rest[0] == '}' {
		out = out[:len(out)-1] // no field follows: no comma
	}
	return append(out, rest...), nil
}

// appendField appends "name":value, (value in JSON) to b.
func appendField(b []byte, name string, value any) []byte {
	n, _ := json.Marshal(name)
	v, _ := json.Marshal(value) // a string or an int
	b = append(append(append(b, n...), ':'), v...)
	return append(b, ',')
}

// gatewayHeaderMatcher is grpc-gateway's default (permanent headers as
// "grpcgateway-*", "Grpc-Metadata-*" headers as metadata), but no header becomes
// the gateway's own metadata.
func gatewayHeaderMatcher(key string) (string, bool) {
	k, ok := runtime.DefaultHeaderMatcher(key)
	if ok && strings.HasPrefix(strings.ToLower(k), gatewayMetaPrefix) {
		return "", false
	}
	return k, ok
}

// requestTLS is r's TLS session (nil on a plain-text port).
func requestTLS(r *http.Request) *tls.ConnectionState {
	st := r.TLS
	if st == nil {
		st, _ = r.Context().Value(tlsStateKey{}).(*tls.ConnectionState)
	}
	return st
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// httpHandler serves the gateway under /v3/ (and /v3beta/, which etcd still
// rewrites), GET /version and GET /health.
func (e *Server) httpHandler(gw http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v3/", gw)
	mux.HandleFunc("/version", e.serveVersion)
	mux.HandleFunc("/health", e.serveHealth)
	limit := e.core.Config().MaxRequestBytes()*2 + 1<<20 // base64 and JSON around the largest message
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v3beta/") {
			r.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		// The body's bytes in flight, from its client's budget as on the HTTP port:
		// its gRPC call runs on the in-process connection, which is not metered.
		release, err := e.core.AdmitBody(r.RemoteAddr, r.ContentLength)
		if err != nil {
			gatewayRefuse(gw, w, r, err)
			return
		}
		defer release()
		mux.ServeHTTP(w, r)
	})
}

// gatewayRefuse answers a request the door refuses before its gRPC call, in the
// gateway's words (etcd's JSON error and the HTTP status of its gRPC code).
func gatewayRefuse(gw http.Handler, w http.ResponseWriter, r *http.Request, err error) {
	mux, ok := gw.(*runtime.ServeMux)
	if !ok {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	runtime.HTTPError(r.Context(), mux, &runtime.JSONPb{}, w, r, etcdError(err))
}

// serveVersion answers etcd's GET /version.
func (e *Server) serveVersion(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
		Storage string `json:"storage"`
	}{Version, Version, Version})
	w.Write(b)
}

// healthAnswer is etcd's /health answer.
type healthAnswer struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

// serveHealth answers etcd's GET /health: healthy when the node has a leader (not
// asked with ?serializable=true) and reads (linearizably, or locally with
// ?serializable=true); 503 otherwise, with etcd's reasons.
func (e *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	h := e.checkHealth(r.Context(), r.URL.Query().Get("serializable") == "true")
	b, _ := json.Marshal(h)
	if h.Health != "true" {
		http.Error(w, string(b), http.StatusServiceUnavailable)
		return
	}
	w.Write(b)
}

func (e *Server) checkHealth(ctx context.Context, serializable bool) healthAnswer {
	if e.Ready != nil {
		select {
		case <-e.Ready:
		default:
			return healthAnswer{Health: "false", Reason: "NOT READY"}
		}
	}
	if !serializable {
		if err := e.core.LeaderContact(); err != nil {
			return healthAnswer{Health: "false", Reason: "RAFT NO LEADER"}
		}
	}
	// etcd reads as root: so does this probe (the zero Caller), and it shows nothing.
	ctx, cancel := e.core.RequestContext(ctx)
	defer cancel()
	if _, err := e.core.Range(ctx, kv.Caller{}, kv.RangeRequest{Key: []byte("health"), Serializable: serializable}); err != nil {
		return healthAnswer{Health: "false", Reason: "RANGE ERROR:" + status.Convert(etcdError(err)).Message()}
	}
	return healthAnswer{Health: "true"}
}

// chanListener is a net.Listener whose connections route hands it.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) push(ctx context.Context, c net.Conn) error {
	select {
	case l.conns <- c:
		return nil
	case <-l.done:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// tokenOf is the call's token: the "token" metadata, or, as etcd reads it too, the
// "authorization" metadata (what etcd's gateway makes of the Authorization header).
func tokenOf(ctx context.Context) string {
	if t := firstIncoming(ctx, rpctypes.TokenFieldNameGRPC); t != "" {
		return t
	}
	return firstIncoming(ctx, rpctypes.TokenFieldNameSwagger)
}
