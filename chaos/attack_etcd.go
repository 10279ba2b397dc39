package chaos

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/kv/api"
)

// The etcd-door attacker (issue #33), beside the Raft intruder and the HTTP flood when
// the cluster serves the etcd API (ProcConfig.Etcd). It speaks raw gRPC (etcd's stubs,
// not clientv3) over TLS with the harness's client certificate, from two loopback
// addresses of its own (etcdAttackHost), so that the per-client bounds it runs into are
// its own and not the workload's, which comes from 127.0.0.1: the streams from one, the
// calls (metadata, leases) from the other, which the streams' budget would refuse. On
// every node, one after another, it
//
//   - floods one Watch stream with etcdProgressRequests RequestProgress and never reads
//     an answer (the door keeps at most one outstanding per stream);
//   - opens idle Watch streams (no request sent) on three connections, one of them
//     holding more than a connection may carry (etcdIdleStreams), and gRPC health Watch
//     streams without a token or a certificate on a fourth: more than the
//     2,500 streams one client may hold (-max-conns-per-client), so some are refused;
//   - sends a Range with etcdHugeMetadata bytes of metadata on a bare HTTP/2
//     connection (gRPC's client keeps to the server's 16 KiB and would refuse it
//     itself), after a Range with 1 KiB on the same connection that must be served;
//
// and, every few seconds, with the read-only token and with a token of another tenant
// (write on tenantPrefix, which leases need), lists the leases, and asks to revoke,
// keep alive and look up the workload's leases (its kept-alive and abandoned leases,
// granted with the management token, and every lease the management token lists then:
// the lock sessions'). The tenant's own lease, granted at the start, is its control:
// listed, renewed and, last, revoked.
//
// checkEtcd then asks: every node's RSS grew by less than etcdMaxRSSGrowth and ran fewer
// than etcdMaxGoroutines goroutines while it was sampled (every second, /proc and
// /metrics); the huge metadata was refused and never served; no lease call of the two
// tokens on a workload lease succeeded, none listed one, and each of revoke, keepalive
// and time-to-live was refused (PermissionDenied) at least once for the kept-alive
// lease; that lease is still granted after the run (unless the workload's KeepAlive
// reported it lost to a fault); the tenant's controls succeeded.

const (
	etcdProgressRequests = 50_000
	etcdHealthStreams    = 300
	etcdHugeMetadata     = 1 << 20
	etcdMaxRSSGrowth     = 512 << 20
	etcdMaxGoroutines    = 20_000
	// etcdLeaseRounds lease attacks, etcdLeaseEvery apart.
	etcdLeaseRounds = 8
	etcdLeaseEvery  = 4 * time.Second
	// etcdMetadataTries per node, 2 s apart, until one is conclusive.
	etcdMetadataTries = 10
	tenantPrefix      = "tenant/"
	etcdCallTimeout   = 5 * time.Second
)

// etcdIdleStreams are the idle Watch streams opened on each of three connections to a
// node: the first over the connection's 1,024 (-max-stream-in-flight: the rest wait in
// the client), all together with the health streams over the client's 2,500.
var etcdIdleStreams = []int{2000, 1000, 500}

// etcdAttackHost is the attacker's source address i (0: streams, 1: calls) on subnet's
// loopback IPs: no node's.
func etcdAttackHost(subnet, i int) string { return fmt.Sprintf("127.%d.0.%d", subnet, 250+i) }

// etcdAttack is the etcd-door attacker's state.
type etcdAttack struct {
	srcStreams      string
	srcCalls        string
	tls, tlsNoCert  *tls.Config
	tenantToken     string
	leases          *Leases
	progressSent    atomic.Int64
	progressStreams atomic.Int64
	idleOpened      atomic.Int64 // created in the client
	idleRefused     atomic.Int64 // answered ResourceExhausted
	idleEnded       atomic.Int64 // ended otherwise before the attack did
	idleWaited      atomic.Int64 // never got a stream of their connection (the client waited)
	healthServing   atomic.Int64 // health streams that heard SERVING or NOT_SERVING
	healthRefused   atomic.Int64
	healthEnded     atomic.Int64
	mu              sync.Mutex
	// held are the idle and health streams open at the end per node, as the client
	// sees them: a stream the server refused for its connection's bound
	// (REFUSED_STREAM) is retried by gRPC's client, and one that waits for its retry
	// looks open; the server's own count shows in its goroutines.
	held              map[string]int
	metaRefused       []string // "node: how"
	metaServed        []string
	metaInconclusive  int
	leaseRefused      map[string]int // "token op" -> PermissionDenied answers
	aliveRefused      map[string]int // "token op" -> PermissionDenied answers for the kept-alive lease
	leaseOther        map[string]int // "token op code" -> other errors (faults)
	leaseTargets      map[int64]bool
	tenantLease       int64
	tenantControls    []string // control failures
	tenantControlsOK  int
	samples           map[string]*nodeSample // node/pid
	sampleErrs        int
	goroutineReadings int
	bytesAttack       // attack_bytes.go
}

type nodeSample struct {
	node                  string
	pid                   int
	firstRSS, maxRSS      int64
	maxGoroutines         int
	rssReads, goroutineRd int
}

// prepareEtcd makes the tenant's policy and token (before the attacker records the ACL
// tokens) and the TLS configs; nil when the cluster serves no etcd door.
func (a *attacker) prepareEtcd(ctx context.Context) error {
	ids := a.c.Members()
	if len(ids) == 0 || a.c.EtcdAddr(ids[0]) == "" {
		return nil
	}
	e := &etcdAttack{srcStreams: etcdAttackHost(a.c.cfg.Subnet, 0), srcCalls: etcdAttackHost(a.c.cfg.Subnet, 1), held: map[string]int{}, leaseRefused: map[string]int{},
		aliveRefused: map[string]int{}, leaseOther: map[string]int{}, leaseTargets: map[int64]bool{},
		samples: map[string]*nodeSample{}}
	e.tls = a.c.tls.client.Clone()
	e.tlsNoCert = a.c.tls.client.Clone()
	e.tlsNoCert.Certificates = nil
	root := a.rootClient()
	defer root.Close()
	if _, err := root.ACLPolicyPut(ctx, api.ACLPolicy{Name: "chaos-tenant",
		Keys: []api.ACLKeyRule{{Prefix: tenantPrefix, Access: api.AccessWrite}}}); err != nil {
		return err
	}
	tok, err := root.ACLTokenCreate(ctx, api.ACLTokenRequest{Policies: []string{"chaos-tenant"}})
	if err != nil {
		return err
	}
	e.tenantToken = tok.SecretID
	a.etcd = e
	return nil
}

// dialer binds the attacker's connections to source address src.
func dialerFrom(src string) *net.Dialer {
	return &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
}

// conn is a gRPC connection of its own to addr (one HTTP/2 connection) from src, with
// the client certificate unless noCert.
func (e *etcdAttack) conn(src, addr string, noCert bool) (*grpc.ClientConn, error) {
	cfg := e.tls
	if noCert {
		cfg = e.tlsNoCert
	}
	d := dialerFrom(src)
	return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}))
}

func withToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, token)
}

// startEtcd starts the etcd-door attacks; they end with ctx.
func (a *attacker) startEtcd(ctx context.Context, leases *Leases, prefix string) {
	e := a.etcd
	e.leases = leases
	a.watchPrefix = prefix
	a.sample(ctx) // the baseline of each node, before the attack
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
				a.sample(ctx)
			}
		}
	}()
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.leaseLoop(ctx) }()
	for i, id := range a.c.Members() {
		addr := a.c.EtcdAddr(id)
		delay := time.Duration(i) * time.Second // the nodes one after another
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if sleepCtx(ctx, delay) {
				a.metadataLoop(ctx, id, addr)
			}
		}()
		// The progress flood's stream first: the idle streams then take the rest of
		// the client's budget.
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if sleepCtx(ctx, delay) {
				a.progressFlood(ctx, id, addr, prefix)
			}
		}()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if sleepCtx(ctx, 2*time.Second+delay) {
				a.idleStreams(ctx, id, addr)
			}
		}()
		if i < bytesNodes {
			a.startBytes(ctx, id, delay)
		}
	}
}

// progressFlood creates a watch of prefix on one stream and sends it
// etcdProgressRequests progress requests, reading nothing.
func (a *attacker) progressFlood(ctx context.Context, id, addr, prefix string) {
	e := a.etcd
	cc, err := e.conn(e.srcStreams, addr, false)
	if err != nil {
		a.breach("etcd: connection to %s: %v", id, err)
		return
	}
	defer cc.Close()
	st, err := pb.NewWatchClient(cc).Watch(withToken(ctx, a.roToken))
	if err != nil {
		return // the node is down, or the attack ended
	}
	e.progressStreams.Add(1)
	end := []byte(prefix)
	end[len(end)-1]++
	if st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: []byte(prefix), RangeEnd: end}}}) != nil {
		return
	}
	req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
	for range etcdProgressRequests {
		if st.Send(req) != nil {
			break
		}
		e.progressSent.Add(1)
	}
	<-ctx.Done() // hold the stream, unread, until the attack ends
}

// idleStreams opens the health streams, then the idle Watch streams, on connections
// of their own, and holds them until the attack ends.
func (a *attacker) idleStreams(ctx context.Context, id, addr string) {
	e := a.etcd
	var held atomic.Int64
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		e.mu.Lock()
		e.held[id] = int(held.Load())
		e.mu.Unlock()
	}()
	hc, err := e.conn(e.srcStreams, addr, true)
	if err != nil {
		a.breach("etcd: connection to %s: %v", id, err)
		return
	}
	defer hc.Close()
	health := healthpb.NewHealthClient(hc)
	for range etcdHealthStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := health.Watch(ctx, &healthpb.HealthCheckRequest{}) // no token
			if err != nil {
				return
			}
			if _, err = st.Recv(); err == nil {
				e.healthServing.Add(1)
				held.Add(1)
				if _, err = st.Recv(); ctx.Err() != nil {
					return // held to the end
				}
				held.Add(-1)
			}
			switch {
			case ctx.Err() != nil:
			case status.Code(err) == codes.ResourceExhausted:
				e.healthRefused.Add(1)
			default:
				e.healthEnded.Add(1)
			}
		}()
	}
	if !sleepCtx(ctx, time.Second) {
		return
	}
	for _, n := range etcdIdleStreams {
		cc, err := e.conn(e.srcStreams, addr, false)
		if err != nil {
			a.breach("etcd: connection to %s: %v", id, err)
			return
		}
		defer cc.Close()
		w := pb.NewWatchClient(cc)
		tctx := withToken(ctx, a.roToken)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := w.Watch(tctx)
				if err != nil {
					if ctx.Err() != nil {
						e.idleWaited.Add(1)
					} else {
						e.idleEnded.Add(1)
					}
					return
				}
				e.idleOpened.Add(1)
				held.Add(1)
				_, err = st.Recv()
				if ctx.Err() != nil {
					return // held to the end
				}
				held.Add(-1)
				if status.Code(err) == codes.ResourceExhausted {
					e.idleRefused.Add(1)
				} else {
					e.idleEnded.Add(1)
				}
			}()
		}
	}
	<-ctx.Done()
}

// Lease tokens of the attack, by name.
const (
	roTokenName     = "read-only"
	tenantTokenName = "tenant"
)

// leaseLoop runs the lease attack etcdLeaseRounds times, etcdLeaseEvery apart: the
// tenant's control lease first, and its revoke last.
func (a *attacker) leaseLoop(ctx context.Context) {
	e := a.etcd
	ids := a.c.Members()
	for round := 0; round < etcdLeaseRounds && ctx.Err() == nil; round++ {
		id := ids[round%len(ids)]
		cc, err := e.conn(e.srcCalls, a.c.EtcdAddr(id), false)
		if err != nil {
			a.breach("etcd: connection to %s: %v", id, err)
			return
		}
		a.leaseRound(ctx, cc, round)
		cc.Close()
		sleepCtx(ctx, etcdLeaseEvery)
	}
	if e.tenantLease != 0 {
		// The control's end: its owner may revoke it (after the attack ended, the
		// faults healed).
		var last error
		for _, id := range ids {
			cc, err := e.conn(e.srcCalls, a.c.EtcdAddr(id), false)
			if err != nil {
				continue
			}
			rctx, cancel := context.WithTimeout(withToken(context.Background(), e.tenantToken), etcdCallTimeout)
			_, last = pb.NewLeaseClient(cc).LeaseRevoke(rctx, &pb.LeaseRevokeRequest{ID: e.tenantLease})
			cancel()
			cc.Close()
			if last == nil {
				e.control(true, "")
				return
			}
		}
		e.control(false, fmt.Sprintf("the tenant could not revoke its own lease %x on any node: %v", e.tenantLease, last))
	}
}

func (e *etcdAttack) control(ok bool, problem string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ok {
		e.tenantControlsOK++
	} else if len(e.tenantControls) < 10 {
		e.tenantControls = append(e.tenantControls, problem)
	}
}

// targets are the workload's leases: the kept-alive and the abandoned one, and every
// lease the management token lists now (the lock sessions') but the tenant's own.
func (a *attacker) targets(ctx context.Context, lc pb.LeaseClient) (alive int64, ids []int64) {
	e := a.etcd
	set := map[int64]bool{}
	if e.leases != nil {
		e.leases.mu.Lock()
		alive = e.leases.log.AliveID
		set[alive], set[e.leases.log.AbandonedID] = true, true
		e.leases.mu.Unlock()
	}
	cctx, cancel := context.WithTimeout(withToken(ctx, a.c.Token()), etcdCallTimeout)
	defer cancel()
	if resp, err := lc.LeaseLeases(cctx, &pb.LeaseLeasesRequest{}); err == nil {
		for _, l := range resp.Leases {
			set[l.ID] = true
		}
	}
	delete(set, 0)
	delete(set, e.tenantLease)
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range set {
		ids = append(ids, id)
		e.leaseTargets[id] = true
	}
	slices.Sort(ids)
	return alive, ids
}

// leaseRound: the tenant's control, then each token's list, revoke, keepalive and
// time to live of every workload lease.
func (a *attacker) leaseRound(ctx context.Context, cc *grpc.ClientConn, round int) {
	e := a.etcd
	lc := pb.NewLeaseClient(cc)
	tctx := withToken(ctx, e.tenantToken)
	if e.tenantLease == 0 {
		cctx, cancel := context.WithTimeout(tctx, etcdCallTimeout)
		g, err := lc.LeaseGrant(cctx, &pb.LeaseGrantRequest{TTL: 60})
		cancel()
		if err == nil {
			e.tenantLease = g.ID
		} else if round == etcdLeaseRounds-1 {
			e.control(false, "the tenant was never granted a lease: "+err.Error())
		}
	}
	alive, targets := a.targets(ctx, lc)
	for _, tok := range []struct{ name, secret string }{{roTokenName, a.roToken}, {tenantTokenName, e.tenantToken}} {
		kctx := withToken(ctx, tok.secret)
		cctx, cancel := context.WithTimeout(kctx, etcdCallTimeout)
		resp, err := lc.LeaseLeases(cctx, &pb.LeaseLeasesRequest{})
		cancel()
		if err == nil {
			ownSeen := false
			for _, l := range resp.Leases {
				e.mu.Lock()
				target := e.leaseTargets[l.ID]
				e.mu.Unlock()
				if target {
					a.breach("etcd: the %s token's LeaseLeases listed the workload's lease %x", tok.name, l.ID)
				}
				ownSeen = ownSeen || l.ID == e.tenantLease
			}
			if tok.name == tenantTokenName && e.tenantLease != 0 {
				e.control(ownSeen, fmt.Sprintf("the tenant's LeaseLeases did not list its own lease %x", e.tenantLease))
			}
		} else {
			e.refusal(tok.name, "list", false, err)
		}
		if tok.name == tenantTokenName && e.tenantLease != 0 {
			// A fault's answer (no leader, a deadline) says nothing either way.
			ttl, err := keepAliveOnce(kctx, lc, e.tenantLease)
			if err == nil || status.Code(err) == codes.PermissionDenied {
				e.control(err == nil && ttl > 0, fmt.Sprintf("the tenant's keepalive of its own lease %x: ttl %d, %v", e.tenantLease, ttl, err))
			}
		}
		for _, id := range targets {
			isAlive := id == alive
			cctx, cancel := context.WithTimeout(kctx, etcdCallTimeout)
			_, err := lc.LeaseRevoke(cctx, &pb.LeaseRevokeRequest{ID: id})
			cancel()
			if err == nil {
				a.breach("etcd: the %s token revoked the workload's lease %x", tok.name, id)
			} else {
				e.refusal(tok.name, "revoke", isAlive, err)
			}
			ttl, err := keepAliveOnce(kctx, lc, id)
			if err == nil && ttl > 0 {
				a.breach("etcd: the %s token kept the workload's lease %x alive (ttl %d)", tok.name, id, ttl)
			} else if err != nil {
				e.refusal(tok.name, "keepalive", isAlive, err)
			}
			cctx, cancel = context.WithTimeout(kctx, etcdCallTimeout)
			t, err := lc.LeaseTimeToLive(cctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
			cancel()
			if err == nil && t.TTL > 0 {
				a.breach("etcd: the %s token looked the workload's lease %x up: ttl %d, keys %q", tok.name, id, t.TTL, t.Keys)
			} else if err != nil {
				e.refusal(tok.name, "timetolive", isAlive, err)
			}
		}
	}
}

// keepAliveOnce sends one keepalive of id on a stream of its own and returns the TTL
// answered.
func keepAliveOnce(ctx context.Context, lc pb.LeaseClient, id int64) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
	defer cancel()
	st, err := lc.LeaseKeepAlive(cctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		_, err = st.Recv() // the stream's error
		return 0, err
	}
	resp, err := st.Recv()
	if err != nil {
		return 0, err
	}
	return resp.TTL, nil
}

// refusal counts an error answer: PermissionDenied is a refusal, anything else (a
// fault: Unavailable, a deadline) says nothing.
func (e *etcdAttack) refusal(token, op string, alive bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if status.Code(err) == codes.PermissionDenied {
		e.leaseRefused[token+" "+op]++
		if alive {
			e.aliveRefused[token+" "+op]++
		}
		return
	}
	e.leaseOther[token+" "+op+" "+status.Code(err).String()]++
}
