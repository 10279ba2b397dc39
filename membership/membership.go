package membership

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"

	"github.com/keel-kv/keel/internal/connlimit"
)

// Membership is one node's view of the cluster: who is alive and what each member
// announces about itself. It owns a memberlist instance and its goroutines from Open
// to Close. All methods are safe for concurrent use.
type Membership struct {
	cfg         Config
	logger      hclog.Logger
	ml          *memberlist.Memberlist
	incarnation uint64

	events  chan Event
	wake    chan struct{} // capacity 1: pending events wait for the pump
	closing chan struct{} // closed by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // pump, retry-join and join goroutines
	mlLog   *logGate       // memberlist's log, shut by Close
	// gossipStreams counts the gossip port's open TCP streams (transport.go).
	gossipStreams *connlimit.Counter

	// lifecycle is held (read) around memberlist calls that must not overlap its
	// Shutdown (Leave panics after it) and (write) by Close around Shutdown.
	lifecycle sync.RWMutex

	mu struct {
		sync.Mutex
		local      Meta
		localBytes []byte             // EncodeMeta(local), served to memberlist
		members    map[string]*Member // by NodeID, the local node included
		pending    map[string]*Event  // undelivered events, one per member
		order      []string           // pending NodeIDs, oldest first
		joined     bool               // a join succeeded
		left       bool               // Leave was called
		closed     bool               // Close was called
		stats      Stats
		// lastMergeReject is why NotifyMerge last refused a join, for Join's error.
		lastMergeReject error
	}
}

// Stats are counters about the member list, for metrics and tests.
type Stats struct {
	EventsDelivered uint64 // events handed to the Events channel
	EventsCoalesced uint64 // events merged into a still pending one (see Event)
	PeersRejected   uint64 // alive messages refused (foreign or bad metadata)
	MergesRejected  uint64 // joins refused because a node offered was foreign or bad
}

// Open starts gossiping on cfg.BindAddr with meta as the local node's metadata and,
// if cfg.Join is set, joins the cluster: synchronously (Open fails if no address
// answers) or, with cfg.RetryJoin, in the background until a join succeeds or Close.
// ctx bounds only Open itself (the synchronous join); it does not stop the background
// retries, so a start-up timeout cannot silently end them. Joined reports success.
//
// meta.NodeID and meta.ClusterLabel may be empty (they are taken from cfg) but must
// not differ from cfg. Open chooses a random Incarnation when meta's is zero.
func Open(ctx context.Context, cfg Config, meta Meta) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.Default()
	}
	meta.Leaving = false
	meta, err := cfg.prepareMeta(meta)
	if err != nil {
		return nil, err
	}
	if meta.Incarnation == 0 {
		meta.Incarnation = NewIncarnation()
	}
	encoded, err := EncodeMeta(meta)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg:         cfg,
		logger:      cfg.Logger.Named("membership"),
		incarnation: meta.Incarnation,
		events:      make(chan Event, cfg.EventBuffer),
		wake:        make(chan struct{}, 1),
		closing:     make(chan struct{}),
	}
	m.mu.local, m.mu.localBytes = meta, encoded
	m.mu.members = make(map[string]*Member)
	m.mu.pending = make(map[string]*Event)

	if err := m.startMemberlist(); err != nil {
		return nil, err
	}
	ml := m.ml
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.pump(runCtx) }()
	m.logger.Info("gossip started", "node", cfg.NodeID, "addr", ml.LocalNode().Address(),
		"incarnation", meta.Incarnation, "encrypted", len(cfg.EncryptKey) > 0, "label", cfg.ClusterLabel)

	if len(cfg.Join) > 0 {
		if cfg.RetryJoin {
			m.wg.Add(1)
			go func() { defer m.wg.Done(); _, _ = m.RetryJoin(runCtx, cfg.Join) }()
		} else if _, err := m.Join(ctx, cfg.Join); err != nil {
			_ = m.Close(context.Background())
			return nil, err
		}
	}
	return m, nil
}

// startMemberlist starts memberlist on its bounded transport, its log behind the gate
// Close shuts; on failure nothing of it is left running.
func (m *Membership) startMemberlist() error {
	cfg := m.cfg
	mc := cfg.memberlistConfig(cfg.Logger, &delegate{m: m})
	m.mlLog = &logGate{w: cfg.Logger.Named("memberlist").StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})}
	mc.Logger = log.New(m.mlLog, "", 0)
	trans, err := newLimitedTransport(mc, mc.Logger)
	if err != nil {
		m.mlLog.close()
		return fmt.Errorf("start gossip on %s: %w", cfg.BindAddr, err)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		trans.Shutdown()
		m.mlLog.close()
		return fmt.Errorf("start gossip on %s: %w", cfg.BindAddr, err)
	}
	m.gossipStreams, m.ml = trans.open, ml
	return nil
}

// prepareMeta fills meta's NodeID and ClusterLabel from c and refuses a mismatch.
func (c Config) prepareMeta(meta Meta) (Meta, error) {
	meta = meta.Clone()
	if meta.NodeID == "" {
		meta.NodeID = c.NodeID
	}
	if meta.ClusterLabel == "" {
		meta.ClusterLabel = c.ClusterLabel
	}
	if meta.NodeID != c.NodeID {
		return meta, fmt.Errorf("%w: Meta.NodeID %q differs from Config.NodeID %q", ErrInvalidMeta, meta.NodeID, c.NodeID)
	}
	if meta.ClusterLabel != c.ClusterLabel {
		return meta, fmt.Errorf("%w: Meta.ClusterLabel %q differs from Config.ClusterLabel %q", ErrInvalidMeta, meta.ClusterLabel, c.ClusterLabel)
	}
	return meta, nil
}

// NewIncarnation returns a random non-zero number identifying this process's life.
func NewIncarnation() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// Join contacts the given gossip addresses (host:port) and merges state with every
// one that answers. It returns how many answered, or ErrJoin if none did (for
// instance: unreachable, another ClusterLabel, another EncryptKey). If ctx ends first
// it returns ctx's error; the attempt then finishes in the background, bounded by
// TCPTimeout per address.
func (m *Membership) Join(ctx context.Context, addrs []string) (int, error) {
	m.mu.Lock()
	switch {
	case m.mu.closed:
		m.mu.Unlock()
		return 0, ErrClosed
	case m.mu.left:
		m.mu.Unlock()
		return 0, ErrLeft
	}
	m.wg.Add(1) // under mu, so never concurrently with Close's Wait
	rejectedBefore := m.mu.stats.MergesRejected
	m.mu.Unlock()

	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer m.wg.Done()
		n, err := m.ml.Join(addrs)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.n == 0 {
			m.mu.Lock()
			cause := r.err
			if m.mu.stats.MergesRejected != rejectedBefore && m.mu.lastMergeReject != nil {
				cause = m.mu.lastMergeReject // memberlist keeps only its text
			}
			m.mu.Unlock()
			return 0, fmt.Errorf("%w: no member of %v answered: %w", ErrJoin, addrs, cause)
		}
		m.mu.Lock()
		m.mu.joined = true
		m.mu.Unlock()
		return r.n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// RetryJoin calls Join until it succeeds, ctx is done or the Membership is closed,
// waiting with jittered exponential backoff from Config.RetryJoinMinBackoff to
// Config.RetryJoinMaxBackoff between attempts (1 s to 30 s by default, whether or
// not Config.RetryJoin is set). It returns Join's result, ctx's error, ErrClosed or
// ErrLeft.
func (m *Membership) RetryJoin(ctx context.Context, addrs []string) (int, error) {
	backoff := max(m.cfg.RetryJoinMinBackoff, time.Millisecond)
	maxBackoff := max(m.cfg.RetryJoinMaxBackoff, backoff)
	for attempt := 1; ; attempt++ {
		n, err := m.Join(ctx, addrs)
		if err == nil {
			m.logger.Info("joined cluster", "contacted", n, "attempts", attempt)
			return n, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrLeft) {
			return 0, err
		}
		m.logger.Warn("join failed, retrying", "addrs", addrs, "attempt", attempt, "backoff", backoff, "error", err)
		t := time.NewTimer(jitter(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-m.closing:
			t.Stop()
			return 0, ErrClosed
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// jitter returns d plus up to 20% so that nodes started together spread their retries.
func jitter(d time.Duration) time.Duration {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return d + time.Duration(binary.BigEndian.Uint64(b[:])%uint64(d/5+1))
}

// Joined reports whether a Join (or Open's join) has succeeded.
func (m *Membership) Joined() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.joined
}

// Members returns every member this node knows, itself included, ordered by NodeID:
// alive ones and those dead or left within Config.DeadRetention. Each is a copy.
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked(time.Now())
	out := make([]Member, 0, len(m.mu.members))
	for _, mem := range m.mu.members {
		out = append(out, mem.clone())
	}
	sortMembers(out)
	return out
}

// Member returns the member with the given NodeID as Members would list it.
func (m *Membership) Member(id string) (Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked(time.Now())
	mem, ok := m.mu.members[id]
	if !ok {
		return Member{}, false
	}
	return mem.clone(), true
}

// pruneLocked forgets members dead or left for longer than DeadRetention.
func (m *Membership) pruneLocked(now time.Time) {
	for id, mem := range m.mu.members {
		if mem.Gone() && now.Sub(mem.LastChange) > m.cfg.DeadRetention && id != m.cfg.NodeID {
			delete(m.mu.members, id)
		}
	}
}

// Local returns the local node as a member: its current metadata, advertised gossip
// address and status (alive, or left after Leave).
func (m *Membership) Local() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem := Member{Meta: m.mu.local.Clone(), Status: StatusAlive}
	if self, ok := m.mu.members[m.cfg.NodeID]; ok {
		mem.Addr, mem.Status, mem.LastChange = self.Addr, self.Status, self.LastChange
	}
	if m.mu.left {
		mem.Status = StatusLeft
	}
	return mem
}

// Events returns the channel of membership changes (see Event for the delivery and
// coalescing rules), the local node's own included: its Join at Open, an Update per
// UpdateMeta, its Leave. It is closed by Close. There is one channel per Membership;
// several readers share its events.
func (m *Membership) Events() <-chan Event { return m.events }

// Stats returns the current counters.
func (m *Membership) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.stats
}

// logGate passes memberlist's log lines on until it is closed. memberlist's Shutdown
// does not wait for a probe in flight, which then logs that the transport is closed:
// Close shuts the gate, so that nothing of a closed Membership logs after Close has
// returned (in tests, a line logged after the test ends panics the test binary).
type logGate struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *logGate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

// close drops every later line; it waits for a line being written.
func (g *logGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
