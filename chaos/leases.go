package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// The lease and lock checkers. Next to the workload, every run
//
//   - grants a lease of aliveTTL, attaches lease/alive to it and keeps it alive with the
//     Go client's KeepAlive through the faults until after the MVCC history was read
//     back; every keepalive answer (and 404) is recorded by the client's transport;
//   - grants a lease of abandonedTTL early, attaches lease/abandoned to it and never
//     keeps it alive: it must expire, neither early nor too late;
//   - runs lockClients clients contending for one Mutex (NewSession/NewMutex), each
//     holding it lockHold and unlocking, recording [acquired, released] on the history
//     clock and the fencing revision.
//
// When a revision happened is learned from the workload's history: revision r was
// committed before the return of any operation that reported a revision >= r, and after
// the call of any linearizable operation that reported one < r (revBounds).

const (
	aliveKey     = "lease/alive"
	abandonedKey = "lease/abandoned"
	lockName     = "lock/chaos"
	aliveTTL     = 6 * time.Second
	abandonedTTL = 3 * time.Second
	lockClients  = 2
	lockHold     = 200 * time.Millisecond
	// sessionTTL is the lock sessions' lease TTL.
	sessionTTL = 6 * time.Second
)

// KeepAliveAnswer is one answer to a keepalive request of the kept-alive lease: the
// request's call and return on the history clock and the TTL it promised (NotFound: the
// answer was 404, the lease is gone).
type KeepAliveAnswer struct {
	Call, Return int64
	TTLMillis    int64
	NotFound     bool
}

// LockHold is one hold of the lock: from Lock's return to the Unlock call (history
// clock), with the fencing revision (the waiter key's create revision). SessionLost says
// the holder's session was lost by the time it released.
type LockHold struct {
	Client            int
	Acquired, Release int64
	Fence             int64
	SessionLost       bool
}

// LeaseLog is what the lease and lock clients did.
type LeaseLog struct {
	// Err says the checker could not set up (no grant, no attach): the run fails.
	Err string

	AliveID                          int64
	AliveGrantCall, AliveGrantReturn int64
	AlivePutRev                      int64
	KeepAlives                       []KeepAliveAnswer
	// Lost is what KeepAlive reported when it gave the lease up ("" if it never did),
	// LostAt when (history clock).
	Lost   string
	LostAt int64

	AbandonedID                              int64
	AbandonedGrantCall, AbandonedGrantReturn int64
	AbandonedPutRev                          int64

	Holds []LockHold
	// LockErrors counts Lock and Unlock calls that failed (a fault, a lost session).
	LockErrors int
}

// LeaseCounts is what CheckLeases counted, for the run's summary.
type LeaseCounts struct {
	KeepAlives, Holds, SessionsLost, LocksLost int
	AliveLost                                  bool
	AbandonedExpiredMs                         int64 // after grant; -1 when never
}

// Leases runs a run's lease and lock clients from StartLeases until Stop.
type Leases struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	h      *History
	logf   func(string, ...any)
	mu     sync.Mutex
	log    LeaseLog
}

// kaRecorder is an http.RoundTripper that records the answers to keepalives.
type kaRecorder struct {
	next http.RoundTripper
	l    *Leases
}

func (k kaRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/keepalive") {
		return k.next.RoundTrip(req)
	}
	call := k.l.h.Now()
	resp, err := k.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	a := KeepAliveAnswer{Call: call}
	switch resp.StatusCode {
	case http.StatusOK:
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var ka api.LeaseKeepAliveResponse
		if rerr != nil || json.Unmarshal(body, &ka) != nil {
			return resp, nil
		}
		a.TTLMillis = ka.TTLMillis
	case http.StatusNotFound:
		a.NotFound = true
	default:
		return resp, nil
	}
	a.Return = k.l.h.Now()
	k.l.mu.Lock()
	k.l.log.KeepAlives = append(k.l.log.KeepAlives, a)
	k.l.mu.Unlock()
	return resp, nil
}

// StartLeases starts the lease and lock clients; they run until Stop, the lock clients
// at most for d. A backend that does not expose its nodes' HTTP addresses runs none
// (nil: not checked).
func StartLeases(ctx context.Context, c Cluster, h *History, d time.Duration, logf func(string, ...any)) *Leases {
	pc, ok := c.(interface{ HTTPAddr(id string) string })
	if !ok {
		logf("leases: the %s backend does not expose HTTP addresses: leases not checked", c.Name())
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Leases{cancel: cancel, h: h, logf: logf}
	members := c.Members()
	newClient := func(i int, rt func(http.RoundTripper) http.RoundTripper, timeout time.Duration) (*client.Client, error) {
		var list []string
		for j := range members {
			list = append(list, pc.HTTPAddr(members[(i+j)%len(members)]))
		}
		var tr http.RoundTripper = &http.Transport{DialContext: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdleConnsPerHost: 8,
			TLSClientConfig: tlsFor(list[0])}
		if rt != nil {
			tr = rt(tr)
		}
		return client.New(list, client.Options{MaxRetries: 2, MinBackoff: 20 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond, HTTPClient: &http.Client{Transport: tr, Timeout: timeout}, TLS: tlsFor(list[0]),
			Token: clusterToken(c)})
	}
	// The kept-alive lease's client sets no request timeout of its own: KeepAlive must
	// get past a node that holds its request (a leader cut off from its peers answers
	// only once the renewal commits or it steps down) by itself.
	cl, err := newClient(0, func(next http.RoundTripper) http.RoundTripper { return kaRecorder{next: next, l: l} }, 0)
	if err == nil {
		err = l.setup(ctx, cl)
	}
	if err != nil {
		l.log.Err = err.Error()
		logf("leases: %v", err)
		return l
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		lost, ok := <-cl.KeepAlive(ctx, l.log.AliveID)
		if ok && ctx.Err() == nil {
			l.mu.Lock()
			l.log.Lost, l.log.LostAt = lost.Error(), h.Now()
			l.mu.Unlock()
			logf("leases: the kept-alive lease was lost: %v", lost)
		}
	}()
	lctx, lcancel := context.WithTimeout(ctx, d)
	var lwg sync.WaitGroup
	for i := 0; i < lockClients; i++ {
		lc, err := newClient(i+1, nil, 0)
		if err != nil {
			l.mu.Lock()
			l.log.Err = "lock client: " + err.Error()
			l.mu.Unlock()
			continue
		}
		lwg.Add(1)
		go func() { defer lwg.Done(); l.locker(lctx, lc, i) }()
	}
	l.wg.Add(1)
	go func() { defer l.wg.Done(); lwg.Wait(); lcancel() }()
	return l
}

// setup grants both leases and attaches their keys.
func (l *Leases) setup(ctx context.Context, cl *client.Client) error {
	grant := func(ttl time.Duration, key string) (id, call, ret, rev int64, err error) {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		call = l.h.Now()
		g, err := cl.Grant(gctx, ttl)
		ret = l.h.Now()
		if err != nil {
			return 0, 0, 0, 0, fmt.Errorf("grant a %s lease: %w", ttl, err)
		}
		rev, err = cl.PutLease(gctx, key, []byte(fmt.Sprintf("lease-%d", g.ID)), g.ID)
		if err != nil {
			return 0, 0, 0, 0, fmt.Errorf("attach %s to lease %d: %w", key, g.ID, err)
		}
		return g.ID, call, ret, rev, nil
	}
	var err error
	lg := &l.log
	if lg.AbandonedID, lg.AbandonedGrantCall, lg.AbandonedGrantReturn, lg.AbandonedPutRev, err = grant(abandonedTTL, abandonedKey); err != nil {
		return err
	}
	lg.AliveID, lg.AliveGrantCall, lg.AliveGrantReturn, lg.AlivePutRev, err = grant(aliveTTL, aliveKey)
	return err
}

// locker takes and releases the lock until ctx ends, with a new session whenever the
// last one was lost or a Lock failed (its waiter key may remain, attached to the session).
func (l *Leases) locker(ctx context.Context, cl *client.Client, id int) {
	var s *client.Session
	closeSession := func() {
		if s != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			s.Close(cctx)
			cancel()
			s = nil
		}
	}
	defer closeSession()
	fail := func() {
		l.mu.Lock()
		l.log.LockErrors++
		l.mu.Unlock()
		closeSession()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		if s == nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ns, err := client.NewSession(sctx, cl, sessionTTL)
			cancel()
			if err != nil {
				fail()
				continue
			}
			s = ns
		}
		m := client.NewMutex(s, lockName)
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := m.Lock(lctx)
		cancel()
		if err != nil {
			fail()
			continue
		}
		hold := LockHold{Client: id, Acquired: l.h.Now(), Fence: m.Revision()}
		select {
		case <-time.After(lockHold):
		case <-ctx.Done():
		}
		hold.Release = l.h.Now()
		select {
		case <-s.Done():
			hold.SessionLost = true
		default:
		}
		l.mu.Lock()
		l.log.Holds = append(l.log.Holds, hold)
		l.mu.Unlock()
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.Unlock(uctx)
		cancel()
		if err != nil || hold.SessionLost {
			fail()
		}
	}
}

// Stop ends the keepalives and the lock clients and returns what they recorded (nil
// when the backend runs none).
func (l *Leases) Stop() *LeaseLog {
	if l == nil {
		return nil
	}
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.log
	out.KeepAlives = append([]KeepAliveAnswer(nil), l.log.KeepAlives...)
	out.Holds = append([]LockHold(nil), l.log.Holds...)
	return &out
}

// revBounds says when revisions were committed, on the history clock, from the
// workload's acknowledged operations.
type revBounds struct {
	before, after []Record
}

// Before is the earliest return of an operation that reported a revision >= r: revision
// r existed by then (MaxInt64 when none did).
func (b revBounds) Before(r int64) int64 {
	t := int64(math.MaxInt64)
	for i := range b.before {
		if o := &b.before[i]; o.Rev >= r {
			t = min(t, o.Return)
		}
	}
	return t
}

// After is the latest call of an operation that reported a revision < r, where the
// revision is at least the store's at a point after the call (a write's own revision, a
// linearizable get's revision: the node answered once it had applied everything
// committed when the read arrived): revision r was committed after that (0 when none).
func (b revBounds) After(r int64) int64 {
	t := int64(0)
	for i := range b.after {
		if o := &b.after[i]; o.Rev < r {
			t = max(t, o.Call)
		}
	}
	return t
}

func newRevBounds(records []Record) revBounds {
	var b revBounds
	for _, r := range records {
		if r.Outcome != OutcomeOK || r.Rev <= 0 {
			continue
		}
		// A late write's return is inferred, not observed.
		if !r.Late {
			b.before = append(b.before, r)
		}
		// Serializable gets may report a lagging replica's revision, scans per-page
		// revisions, and a refused CAS, a failed txn guard or a delete of nothing are
		// left out as answers whose revision need not be the store's latest.
		switch {
		case r.Kind == OpGet, r.Kind == OpPut, r.Kind == OpCAS && r.Succeeded,
			r.Kind == OpTxn && r.Succeeded, r.Kind == OpDelete && r.Deleted > 0:
			b.after = append(b.after, r)
		}
	}
	return b
}

// deletedAfter is the first revision after from that deleted key (0 when none).
func deletedAfter(tl *Timeline, key string, from int64) int64 {
	for r := max(from+1, tl.From); r <= tl.To; r++ {
		if ch := tl.Changes[r]; ch != nil {
			for _, k := range ch.Deletes {
				if k == key {
					return r
				}
			}
		}
	}
	return 0
}

// expiryBound is how long after grant + TTL the abandoned lease may take to expire:
// 1 s for an election (a leader lost right at expiry), 1 s for the checkpoint interval
// (a new leader resumes the lease from the last checkpointed remaining TTL, up to 1 s
// stale), 1 s for the expiry sweep and the revoke's commit on 2 busy cores, plus the
// longest fault window of the run (a cluster without quorum, or a frozen leader,
// expires nothing until the fault heals).
func expiryBound(events []FaultEvent) time.Duration {
	longest := int64(0)
	for _, e := range events {
		longest = max(longest, e.End-e.Start)
	}
	return 3*time.Second + time.Duration(longest)
}

func ms(t int64) string { return fmt.Sprintf("%.0fms", float64(t)/1e6) }

// CheckLeases checks the lease and lock clients' log against the MVCC history tl and
// the workload's records (for when revisions were committed). lg nil: not checked.
func CheckLeases(lg *LeaseLog, tl *Timeline, records []Record, events []FaultEvent) (LeaseCounts, []string) {
	cnt := LeaseCounts{AbandonedExpiredMs: -1}
	if lg == nil {
		return cnt, nil
	}
	if lg.Err != "" {
		return cnt, []string{"leases: " + lg.Err}
	}
	var out []string
	cnt.KeepAlives, cnt.Holds, cnt.AliveLost = len(lg.KeepAlives), len(lg.Holds), lg.Lost != ""
	if tl == nil {
		return cnt, []string{"leases: no MVCC history was read: leases not checked"}
	}
	b := newRevBounds(records)

	// The abandoned lease: deleted, never before grant + TTL, and within the bound.
	if r := deletedAfter(tl, abandonedKey, lg.AbandonedPutRev); r == 0 {
		out = append(out, fmt.Sprintf("floor: %s (lease %d, TTL %s, attached at revision %d) was never deleted: the abandoned lease did not expire",
			abandonedKey, lg.AbandonedID, abandonedTTL, lg.AbandonedPutRev))
	} else {
		earliest := lg.AbandonedGrantCall + int64(abandonedTTL)
		latest := lg.AbandonedGrantReturn + int64(abandonedTTL+expiryBound(events))
		if by := b.Before(r); by < earliest {
			out = append(out, fmt.Sprintf("lease: %s deleted at revision %d by %s, before its lease's grant (called at %s) + TTL %s = %s: expired early",
				abandonedKey, r, ms(by), ms(lg.AbandonedGrantCall), abandonedTTL, ms(earliest)))
		}
		if after := b.After(r); after > latest {
			out = append(out, fmt.Sprintf("lease: %s deleted at revision %d after %s, later than grant (returned at %s) + TTL %s + bound %s = %s: expired late",
				abandonedKey, r, ms(after), ms(lg.AbandonedGrantReturn), abandonedTTL, expiryBound(events), ms(latest)))
		}
		if by := b.Before(r); by != math.MaxInt64 {
			cnt.AbandonedExpiredMs = (by - lg.AbandonedGrantCall) / 1e6
		}
	}

	// The kept-alive lease: every answer promised the lease until at least its call +
	// its TTL (the server counts from when it handled the request).
	promised := lg.AliveGrantCall + int64(aliveTTL)
	for _, a := range lg.KeepAlives {
		if !a.NotFound {
			promised = max(promised, a.Call+a.TTLMillis*int64(time.Millisecond))
		}
	}
	for _, a := range lg.KeepAlives {
		if a.NotFound && a.Return < promised {
			out = append(out, fmt.Sprintf("lease: a keepalive of lease %d answered 404 at %s, while an answer had promised it until %s",
				lg.AliveID, ms(a.Return), ms(promised)))
			break
		}
	}
	if r := deletedAfter(tl, aliveKey, lg.AlivePutRev); r != 0 {
		switch by := b.Before(r); {
		case by < promised:
			out = append(out, fmt.Sprintf("lease: %s deleted at revision %d by %s, while a keepalive answer had promised its lease until %s",
				aliveKey, r, ms(by), ms(promised)))
		case lg.Lost == "":
			out = append(out, fmt.Sprintf("lease: %s deleted at revision %d while its keepalives ran and never reported the lease lost", aliveKey, r))
		}
	}

	// The lock: fencing revisions increase in acquisition order; no two holds overlap
	// unless the earlier holder's session was lost.
	holds := append([]LockHold(nil), lg.Holds...)
	sort.SliceStable(holds, func(i, j int) bool { return holds[i].Acquired < holds[j].Acquired })
	for i := range holds {
		if holds[i].SessionLost {
			cnt.SessionsLost++
		}
		if i > 0 && holds[i].Fence <= holds[i-1].Fence {
			out = append(out, fmt.Sprintf("lock: client %d acquired at %s with fencing revision %d, not above %d of client %d's earlier hold (acquired at %s)",
				holds[i].Client, ms(holds[i].Acquired), holds[i].Fence, holds[i-1].Fence, holds[i-1].Client, ms(holds[i-1].Acquired)))
		}
		for j := 0; j < i; j++ {
			a, c := holds[j], holds[i]
			if c.Acquired >= a.Release {
				continue
			}
			if a.SessionLost {
				cnt.LocksLost++
				continue
			}
			out = append(out, fmt.Sprintf("lock: client %d acquired at %s (fence %d) while client %d held it [%s, %s] (fence %d) with its session alive",
				c.Client, ms(c.Acquired), c.Fence, a.Client, ms(a.Acquired), ms(a.Release), a.Fence))
		}
	}
	if len(holds) < minLockHolds {
		out = append(out, fmt.Sprintf("floor: %d lock acquisitions, want >= %d", len(holds), minLockHolds))
	}
	return cnt, out
}

// minLockHolds is the least number of lock acquisitions of a run: two clients holding
// for 200 ms each make dozens over a window of 20 s or more even when every fault costs
// them a session.
const minLockHolds = 3

// String is the counts' part of the run's summary ("" when the checkers did not run).
func (c LeaseCounts) String() string {
	if c.KeepAlives == 0 && c.Holds == 0 {
		return ""
	}
	return fmt.Sprintf(" keepalives=%d alive_lease_lost=%t abandoned_expired_after=%dms lock_holds=%d sessions_lost=%d locks_lost=%d",
		c.KeepAlives, c.AliveLost, c.AbandonedExpiredMs, c.Holds, c.SessionsLost, c.LocksLost)
}
