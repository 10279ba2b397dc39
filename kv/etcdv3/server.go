package etcdv3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/kv"
)

// Version is the etcd release this door reports (Maintenance.Status): a version
// that kube-apiserver and etcdctl accept. It says which API the door speaks, not that
// keel is etcd.
const Version = "3.6.0"

// etcdKeyspaceEnd is above every UTF-8 key: the translation of etcd's range end "\x00".
const etcdKeyspaceEnd = "\xff"

// Server serves the etcd v3 gRPC API over a Server's store and rules. Create it
// with New; Serve and Stop may be called from different goroutines.
type Server struct {
	core   *kv.Server
	grpc   *grpc.Server
	gwGRPC *grpc.Server // the same services for the gateway's in-process connection
	health *health.Server
	addr   string                                // set by Serve: the listener's address, for MemberList
	gw     *gateway                              // set by Serve: the HTTP half (gateway.go)
	ids    struct{ self, cluster atomic.Uint64 } // cached by selfID, clusterID
	// streaming holds the full names of the streaming methods (tap); read-only once
	// New returns.
	streaming map[string]bool
	metrics   *grpcMetrics // metrics.go

	// ProgressNotifyInterval is how often an idle watch created with progress_notify
	// hears the revision it reached (etcd's --watch-progress-notify-interval). Set it
	// before Serve; zero is DefaultProgressNotifyInterval.
	ProgressNotifyInterval time.Duration
	// Ready, when set before Serve, holds every call but gRPC health until it is
	// closed (each call waits within its own deadline; health says NOT_SERVING until
	// then). The agent closes it once the node's start records are applied, as etcd
	// serves its clients only once it has published its member attributes: no etcd
	// client sees the store before them (a fresh store's revision 0, which
	// kube-apiserver refuses; a revision that moves with no client write).
	Ready <-chan struct{}

	mu      sync.Mutex
	closed  bool
	streams sync.WaitGroup
	stop    chan struct{} // closed by Stop: ends watch and keepalive streams
	// stopping is cancelled by Stop, with stop: a stream ends on it with
	// context.AfterFunc, which holds no goroutine while the stream lives.
	stopping    context.Context
	stopStreams context.CancelFunc
}

// New returns the etcd door of s. It serves TLS when s does (with the same
// certificates and client-certificate rule) and the same ACLs: an etcd client sends a
// keel token as the "token" metadata, or "authorization" (the JSON gateway's
// Authorization header), or gets it from Authenticate.
func New(core *kv.Server) *Server {
	e := &Server{core: core, health: health.NewServer(), stop: make(chan struct{}), metrics: newGRPCMetrics()}
	e.stopping, e.stopStreams = context.WithCancel(context.Background())
	cfg := core.Config()
	opts := []grpc.ServerOption{
		// One unary interceptor, not a chain of two: gRPC's chain costs a closure a call.
		grpc.UnaryInterceptor(e.unary),
		grpc.ChainStreamInterceptor(e.metrics.stream, e.streamInterceptor),
		grpc.InTapHandle(e.tap), // every call's slot (bounds.go)
		// Calls run on a pool of goroutines that keep their grown stacks, instead of
		// one new goroutine a call that grows its stack (runtime.copystack was 8–10 %
		// of a serving node's CPU): 5–8 % less server CPU per read against clientv3's
		// CPU in the same run, writes unchanged (bench/README.md). A call that finds
		// every worker busy (watches hold theirs) gets its own goroutine, as before.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.MaxHeaderListSize(kv.MaxHeaderListBytes),
		grpc.MaxRecvMsgSize(e.maxRecvMsgBytes()),
		// A stream's window stays 64 KiB (gRPC's default, and no BDP growth to 16 MiB
		// a stream): what a client may push on a stream before the call reads a
		// message, outside the bytes-in-flight budget (msgbytes.go).
		grpc.InitialWindowSize(64 << 10),
		// etcd's keepalive policy: clients (kube-apiserver pings every 30 s) may ping
		// every 5 s, with or without a stream, instead of gRPC's 5-minute default
		// that would close their connections with "too many pings".
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
	}
	// Serve does the TLS handshake (with cfg.TLS) before it routes a connection to
	// gRPC or to the JSON gateway (gateway.go): gRPC's credentials only report it.
	opts = append(opts, grpc.Creds(handshaken{meter: e.meterConn}))
	// One connection carries at most MaxStreamInFlight calls at once (1,024 by
	// default), as one stream-protocol connection carries at most that many requests:
	// a client waits to open one more (HTTP/2 flow control, no error), and gRPC
	// refuses a stream over it before it runs a handler or a goroutine. Without it one
	// connection held 50,000 Watch streams (issue #33). etcd's clients multiplex their
	// watches on a stream or a few. The gateway's in-process connection carries every
	// HTTP client's calls, so its server has no such bound: each call still takes its
	// HTTP client's slot (tap), which bounds them per client.
	e.grpc = e.newGRPC(append(opts, grpc.MaxConcurrentStreams(uint32(min(cfg.MaxStreamInFlight, math.MaxUint32))))...)
	e.gwGRPC = e.newGRPC(opts...)
	e.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	e.streaming = streamingMethods(e.grpc)
	return e
}

// streamWorkers is the size of each gRPC server's pool of call goroutines: 64
// clients' calls at once with room for the streams that hold a worker for their life.
const streamWorkers = 256

// maxRecvMsgBytes is gRPC's MaxRecvMsgSize: the largest request, and its framing.
func (e *Server) maxRecvMsgBytes() int { return int(e.core.Config().MaxRequestBytes()) + 4096 }

// newGRPC is a gRPC server with the etcd API's services.
func (e *Server) newGRPC(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(opts...)
	pb.RegisterKVServer(s, etcdKV{e: e})
	pb.RegisterWatchServer(s, etcdWatch{e: e})
	pb.RegisterLeaseServer(s, etcdLease{e: e})
	pb.RegisterClusterServer(s, etcdCluster{e: e})
	pb.RegisterMaintenanceServer(s, etcdMaintenance{e: e})
	pb.RegisterAuthServer(s, etcdAuth{e: e})
	healthpb.RegisterHealthServer(s, e.health)
	return s
}

// Serve serves the etcd API on ln until Stop, gRPC and etcd's JSON gateway (and GET
// /version, /health) on the one listener (gateway.go); it returns nil after Stop.
func (e *Server) Serve(ln net.Listener) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		ln.Close()
		return errors.New("etcdv3: Serve called after Stop")
	}
	e.addr = ln.Addr().String()
	e.mu.Unlock()
	e.core.Logger().Info("serving the etcd v3 API", "addr", e.addr, "tls", e.core.Config().TLS != nil)
	if e.Ready != nil {
		e.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		go func() {
			select {
			case <-e.Ready:
				e.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			case <-e.stop:
			}
		}()
	}
	if err := e.serve(ln); err != nil {
		return fmt.Errorf("etcdv3: serve: %w", err)
	}
	return nil
}

// Stop ends the watch and keepalive streams, lets unary calls finish until ctx is
// done, then closes every connection.
func (e *Server) Stop(ctx context.Context) {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.stop)
		e.stopStreams()
	}
	gw := e.gw
	e.mu.Unlock()
	e.health.Shutdown()
	if gw != nil {
		gw.stop(ctx)
	}
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range []*grpc.Server{e.grpc, e.gwGRPC} {
			wg.Add(1)
			go func() { defer wg.Done(); s.GracefulStop() }()
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		e.grpc.Stop()
		e.gwGRPC.Stop()
		<-done
	}
}

// Addr is the address Serve listens on ("" before Serve).
func (e *Server) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}

// openMethods are served without admit's token check: Status, whose handler asks the
// core's status rule (kv.Server.CheckStatus: it also admits a node certificate),
// Authenticate, which is how a client gets a token, and AuthStatus (open on etcd).
// gRPC health is open before them.
var openMethods = map[string]bool{
	pb.Maintenance_Status_FullMethodName: true,
	pb.Auth_Authenticate_FullMethodName:  true,
	pb.Auth_AuthStatus_FullMethodName:    true, // etcd: any caller may ask
}

// admit runs every call's checks before its handler: the client certificate (when the
// server requires one), the token (the "token" metadata, a keel ACL secret), and
// etcd's require-leader metadata. It returns ctx carrying the token's Caller.
//
// gRPC health (Check and Watch) needs neither: as etcd's, it answers load balancers
// and gRPC's client-side health checking, which send no token and may hold no
// certificate. What bounds a tokenless client is what bounds any client: a health
// Watch holds a slot of its client's stream budget, a Check one of its requests in
// flight, and its metadata is bounded (bounds.go).
func (e *Server) admit(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return ctx, nil
	}
	if err := e.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := e.checkClientCert(ctx); err != nil {
		return nil, etcdError(err)
	}
	if hasLeaderMD(ctx) {
		if err := e.core.LeaderContact(); err != nil {
			return nil, etcdError(err)
		}
	}
	if openMethods[method] {
		return ctx, nil
	}
	c, err := e.core.Authenticate(ctx, tokenOf(ctx))
	if err != nil {
		return nil, etcdError(err)
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

type callerKey struct{}

// callerOf is the Caller admit found for ctx's call (the zero Caller, whose rights are
// not checked, only for the open methods, which call no checked operation).
func callerOf(ctx context.Context) kv.Caller {
	c, _ := ctx.Value(callerKey{}).(kv.Caller)
	return c
}

// firstIncoming is the first value of the call's metadata key, "" when absent. A call
// tap gave a slot has its header metadata there, whose names HTTP/2 makes lower case:
// one map lookup (admit asks for three keys a call, most of them absent, and
// metadata.ValueFromIncomingContext compares an absent key with every name, case
// folded, and copies a present one). Any other context is matched without case, and
// metadata.FromIncomingContext would copy the whole metadata, five allocations.
func firstIncoming(ctx context.Context, key string) string {
	if c, _ := ctx.Value(callSlotKey{}).(*callSlot); c != nil && c.md != nil {
		if v := c.md[key]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// checkClientCert asks the core's client-certificate rule of the call's TLS session. A
// call through the JSON gateway was asked at its HTTP request, where the HTTP client's
// session is (gatewayMD); its in-process connection has none.
func (e *Server) checkClientCert(ctx context.Context) error {
	if _, passed, ok := gatewayPeer(ctx); ok {
		if !passed {
			return fmt.Errorf("%w: the HTTP client's certificate was refused (missing, or revoked)", kv.ErrClientCertRequired)
		}
		return nil
	}
	return e.core.CheckClientCert(func() *tls.ConnectionState { return peerTLS(ctx) })
}

// peerTLS is the call's TLS session (its verified client certificate, if any); nil on
// a plain-text port.
func peerTLS(ctx context.Context) *tls.ConnectionState {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	return &ti.State
}

// unary is the door's unary interceptor: every call is counted (metrics), admitted or
// not, then passes unaryInterceptor's checks.
func (e *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo,
	handler grpc.UnaryHandler) (any, error) {
	return e.metrics.unary(ctx, req, info, handler, e.unaryInterceptor)
}

func (e *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo,
	handler grpc.UnaryHandler) (any, error) {
	// The call holds a slot of its client's requests in flight since its headers
	// (tap), and while its handler runs.
	drop, ok := holdCallSlot(ctx)
	if !ok {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer drop()
	ctx, err := e.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	// A serializable range reads local state at once: no deadline (a timer and a
	// context per read saved), as GET /v1/kv does.
	if r, ok := req.(*pb.RangeRequest); !ok || !r.Serializable {
		var cancel context.CancelFunc
		ctx, cancel = e.core.RequestContext(ctx)
		defer cancel()
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, etcdError(err)
	}
	return resp, nil
}

// admittedStream carries the Caller admit found into a stream's handler.
type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s admittedStream) Context() context.Context { return s.ctx }

// streamInterceptor runs admit's checks before every stream's handler; the stream
// holds a slot of its client's budget since its headers (tap), and while its handler
// runs.
func (e *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo,
	handler grpc.StreamHandler) error {
	drop, ok := holdCallSlot(ss.Context())
	if !ok {
		return status.FromContextError(ss.Context().Err()).Err()
	}
	defer drop()
	ctx, err := e.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return rpctypes.ErrGRPCStopped
	}
	e.streams.Add(1)
	e.mu.Unlock()
	defer e.streams.Done()
	if err := handler(srv, admittedStream{ServerStream: ss, ctx: ctx}); err != nil {
		return etcdError(err)
	}
	return nil
}

// header is the response header of an answer at revision rev. It is built for
// every answer and every watch event, so it reads no member list.
func (e *Server) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: e.clusterID(), MemberId: e.selfID(), Revision: rev, RaftTerm: e.term()}
}

// term is the node's current Raft term.
func (e *Server) term() uint64 { return e.core.Term() }

// selfID is this node's member ID, computed once.
func (e *Server) selfID() uint64 {
	if id := e.ids.self.Load(); id != 0 {
		return id
	}
	id := memberID(e.core.NodeStatus().NodeID)
	e.ids.self.Store(id)
	return id
}

// clusterID is the cluster's ID as etcd's 64-bit number (0 until the cluster metadata
// is applied, or for a store that does not expose it); computed once known.
func (e *Server) clusterID() uint64 {
	if id := e.ids.cluster.Load(); id != 0 {
		return id
	}
	id, ok := e.core.ClusterID()
	if !ok {
		return 0
	}
	h := hash64(id)
	e.ids.cluster.Store(h)
	return h
}

// memberID is a node's ID as etcd's 64-bit number: a hash of keel's node ID.
func memberID(nodeID string) uint64 {
	if nodeID == "" {
		return 0
	}
	return hash64(nodeID)
}

func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// urlScheme is the scheme of this door's URLs.
func (e *Server) urlScheme() string {
	if e.core.Config().TLS != nil {
		return "https://"
	}
	return "http://"
}

// endOnLeaderLoss cancels a long stream made with require-leader metadata (ctx's)
// with a raft.ErrNoLeader cause once the node has been without a leader for the
// core's stream grace (kv.Server.StreamLeaderLost), not at the first loss of contact:
// etcd's monitorLeader rule. The returned func stops watching.
func (e *Server) endOnLeaderLoss(ctx context.Context, cancel context.CancelCauseFunc) func() bool {
	if !hasLeaderMD(ctx) {
		return func() bool { return false }
	}
	lost := e.core.StreamLeaderLost()
	if lost == nil {
		return func() bool { return false }
	}
	return context.AfterFunc(lost, func() { cancel(context.Cause(lost)) })
}

// hasLeaderMD reports whether the client asked for require-leader semantics.
func hasLeaderMD(ctx context.Context) bool {
	return strings.EqualFold(firstIncoming(ctx, rpctypes.MetadataRequireLeaderKey), rpctypes.MetadataHasLeader)
}

// peerAddr is the address of the gRPC peer of ctx ("" when unknown), for the
// per-client request bound (the core counts clients by host).
func peerAddr(ctx context.Context) string {
	if addr, _, ok := gatewayPeer(ctx); ok {
		return addr
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// waitReady returns once Ready is closed (at once when it is nil), or an error when
// ctx ends or Stop is called first.
func (e *Server) waitReady(ctx context.Context) error {
	if e.Ready == nil {
		return nil
	}
	select {
	case <-e.Ready:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-e.stop:
		return rpctypes.ErrGRPCStopped
	}
}
