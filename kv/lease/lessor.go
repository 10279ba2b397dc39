package lease

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// Store is what the lessor reads: the node's views and its raft state (*raft.Node
// satisfies it, as does kv's Store).
type Store interface {
	View(ctx context.Context, c fsm.Consistency) (*fsm.View, error)
	Status() raft.Status
}

// LeaderCaller is what leases need beyond Store: keepalives are served by the leader,
// which keeps the deadlines, and the leader's expiry and checkpoint commands are never
// forwarded (*raft.Node satisfies it). A store without it serves no lease keepalives
// (503) and expires no lease.
type LeaderCaller interface {
	CallLeader(ctx context.Context, body []byte) ([]byte, error)
	SetLeaderHandler(h raft.LeaderHandler)
	// ApplyLeader is Store.Apply, only on the leader: a follower fails at once.
	ApplyLeader(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
}

// Lessor timing. See fsm/lease.go for the design and the expiry bound they give.
const (
	// lessorPoll: how often every node notes the lease checkpoints it has applied
	// (the time it saw them bounds how late a successor leader may expire a lease)
	// and the leader looks for expired leases.
	lessorPoll = 50 * time.Millisecond
	// checkpointInterval: how often the leader writes the moved deadlines of all
	// leases in one CmdLeaseCheckpoint.
	checkpointInterval = time.Second
	// takeOverWait bounds a new leader's linearizable read before it takes over: a
	// heartbeat round and the term's barrier, which a loaded machine stretches past
	// any multiple of lessorPoll. One election timeout (raft.DefaultConfig): a leader
	// that cannot confirm itself in that long has lost its followers anyway, and until
	// it takes over it serves no keepalive, so giving up sooner only starts again.
	takeOverWait = time.Second
)

// seenCheckpoint is when this node first saw a lease's last checkpoint applied.
type seenCheckpoint struct {
	scan      uint64 // the observe pass that last found the lease
	index     uint64
	at        time.Time
	remaining time.Duration
	ttl       time.Duration
}

func (c seenCheckpoint) floor() time.Time { return c.at.Add(c.remaining) }

// Lessor runs on every node: it notes when each lease checkpoint was applied here and,
// while the node leads, keeps the deadlines in memory, serves keepalives, writes the
// periodic checkpoint and revokes expired leases through Raft. Its goroutine runs from
// start to stop; keepalives run on the callers' goroutines, and renewals that need a
// Raft entry are batched by one goroutine at a time (renewLoop).
type Lessor struct {
	store Store
	lc    LeaderCaller // nil: the lessor only observes
	log   hclog.Logger

	mu struct {
		sync.Mutex
		seen map[int64]seenCheckpoint
		// term is the term this node leads with its deadlines initialized, 0 when it
		// does not lead.
		term      uint64
		deadlines map[int64]time.Time
		dirty     map[int64]bool // deadline moved since the last checkpoint
		// promised is, per lease, a time before which no leader will expire it: the
		// deadline this leader had when it computed a checkpoint that has applied since
		// (any successor saw that entry after it was computed). Unknown for leases
		// this leader has not checkpointed yet.
		promised map[int64]time.Time
		pending  []*renewal // keepalives waiting for a renewal entry
		renewing bool
		// gen is the fsm.View.LeaseGen observe last looked at (valid once scans > 0):
		// a view with the same leases is not scanned again. scans counts the passes.
		gen   uint64
		scans uint64
		// nextExpiry is no later than the earliest deadline: expire looks at the
		// deadlines only once it has passed (keepalives move deadlines later only).
		nextExpiry time.Time
	}

	cancel context.CancelFunc
	done   chan struct{}
}

type renewal struct {
	id   int64
	done chan error
}

// New returns the lessor of a node over store; it observes until Start.
func New(store Store, log hclog.Logger) *Lessor {
	l := &Lessor{store: store, log: log}
	l.lc, _ = store.(LeaderCaller)
	l.mu.seen = make(map[int64]seenCheckpoint)
	return l
}

// Start runs the lessor's loop until Stop.
func (l *Lessor) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go l.run(ctx)
}

// Stop ends the loop and waits for it; safe on a lessor never started.
func (l *Lessor) Stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
}

func (l *Lessor) run(ctx context.Context) {
	defer close(l.done)
	tick := time.NewTicker(lessorPoll)
	defer tick.Stop()
	var lastCheckpoint time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if v, err := l.store.View(ctx, fsm.Serializable); err == nil {
			l.observe(v, time.Now())
		}
		st := l.store.Status()
		if st.State != "Leader" || l.lc == nil {
			l.abdicate()
			continue
		}
		if !l.leading(st.Term) && !l.takeOver(ctx, st.Term) {
			continue
		}
		l.expire(ctx)
		if time.Since(lastCheckpoint) >= checkpointInterval {
			if l.checkpoint(ctx) {
				lastCheckpoint = time.Now()
			}
		}
	}
}

// observe notes, at now, the checkpoints of v not seen before, forgets revoked leases
// and, on the leader, starts a deadline for leases granted since the last poll. Every
// node polls, so it must cost little with tens of thousands of leases: a view whose
// leases are those last observed (fsm.View.LeaseGen; an older view too) costs nothing,
// and a newer one costs the leases changed since (fsm.View.LeaseChangesSince); only
// the first view, or one after a restore, is walked whole.
func (l *Lessor) observe(v *fsm.View, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gen := v.LeaseGen()
	if l.mu.scans > 0 {
		if gen <= l.mu.gen {
			return
		}
		if ids, ok := v.LeaseChangesSince(l.mu.gen); ok {
			for _, id := range ids {
				if ls, ok := v.Lease(id); ok {
					l.noteLocked(ls, now, l.mu.scans)
				} else {
					l.forgetLocked(id)
				}
			}
			l.mu.gen = gen
			return
		}
	}
	l.mu.gen = gen
	l.mu.scans++
	scan := l.mu.scans
	v.RangeLeases(func(ls fsm.Lease) bool {
		l.noteLocked(ls, now, scan)
		return true
	})
	for id, c := range l.mu.seen {
		if c.scan != scan {
			l.forgetLocked(id)
		}
	}
}

// noteLocked records lease ls as found by observe pass scan at now.
func (l *Lessor) noteLocked(ls fsm.Lease, now time.Time, scan uint64) {
	c, ok := l.mu.seen[ls.ID]
	if !ok || c.index != ls.CheckpointIndex {
		c = seenCheckpoint{index: ls.CheckpointIndex, at: now, remaining: time.Duration(ls.Remaining) * time.Millisecond,
			ttl: time.Duration(ls.TTL) * time.Millisecond}
	}
	c.scan = scan
	l.mu.seen[ls.ID] = c
	if l.mu.deadlines != nil {
		if _, ok := l.mu.deadlines[ls.ID]; !ok {
			l.setDeadlineLocked(ls.ID, c.floor())
		}
	}
}

// forgetLocked drops a lease that no longer exists.
func (l *Lessor) forgetLocked(id int64) {
	delete(l.mu.seen, id)
	if l.mu.deadlines != nil {
		delete(l.mu.deadlines, id)
		delete(l.mu.dirty, id)
		delete(l.mu.promised, id)
	}
}

func (l *Lessor) leading(term uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.term == term && l.mu.deadlines != nil
}

// takeOver starts leading in term: once the node's state holds every committed entry
// (a linearizable view waits for the term's barrier), each lease's deadline starts at
// the floor of its last checkpoint — when this node saw it plus its Remaining — never
// at the full TTL.
func (l *Lessor) takeOver(ctx context.Context, term uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, takeOverWait)
	defer cancel()
	v, err := l.store.View(ctx, fsm.Linearizable)
	if err != nil {
		return false
	}
	l.observe(v, time.Now())
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.term = term
	l.mu.deadlines = make(map[int64]time.Time, len(l.mu.seen))
	l.mu.dirty = make(map[int64]bool)
	l.mu.promised = make(map[int64]time.Time)
	for id, c := range l.mu.seen {
		l.setDeadlineLocked(id, c.floor())
	}
	l.log.Info("lessor leading", "term", term, "leases", len(l.mu.deadlines))
	return true
}

// abdicate drops the leader's deadlines; waiting renewals fail (their clients retry on
// the new leader).
func (l *Lessor) abdicate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.term, l.mu.deadlines, l.mu.dirty, l.mu.promised = 0, nil, nil, nil
	l.mu.nextExpiry = time.Time{}
}

// setDeadlineLocked starts lease id's deadline at d (the leader's).
func (l *Lessor) setDeadlineLocked(id int64, d time.Time) {
	l.mu.deadlines[id] = d
	if l.mu.nextExpiry.IsZero() || d.Before(l.mu.nextExpiry) {
		l.mu.nextExpiry = d
	}
}

// expire revokes, in one command, every lease whose deadline has passed.
func (l *Lessor) expire(ctx context.Context) {
	now := time.Now()
	l.mu.Lock()
	if now.Before(l.mu.nextExpiry) {
		l.mu.Unlock()
		return
	}
	var ids []int64
	var next time.Time
	for id, d := range l.mu.deadlines {
		switch {
		case !now.Before(d):
			if len(ids) < fsm.MaxLeaseBatch {
				ids = append(ids, id)
			}
		case next.IsZero() || d.Before(next):
			next = d
		}
	}
	if len(ids) > 0 {
		// Look again at the next poll: until the revoke applies (or if it fails, or
		// more than a batch was due) these leases are still here.
		next = now
	}
	l.mu.nextExpiry = next
	l.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	res, err := l.lc.ApplyLeader(ctx, &fsm.Command{Type: fsm.CmdLeaseRevoke, LeaseIDs: ids})
	if err != nil {
		l.log.Warn("lease expiry failed", "leases", len(ids), "error", err)
		return
	}
	if res.Err != nil {
		l.log.Warn("lease expiry refused", "error", res.Err)
		return
	}
	l.log.Debug("leases expired", "leases", ids, "revision", res.Revision)
}

// checkpoint writes the moved deadlines of all leases in one command. It reports
// whether nothing was left to write.
func (l *Lessor) checkpoint(ctx context.Context) bool {
	l.mu.Lock()
	ids := make([]int64, 0, len(l.mu.dirty))
	for id := range l.mu.dirty {
		if len(ids) == fsm.MaxLeaseBatch {
			break
		}
		ids = append(ids, id)
		delete(l.mu.dirty, id)
	}
	l.mu.Unlock()
	if len(ids) == 0 {
		return true
	}
	if err := l.writeRemaining(ctx, ids); err != nil {
		l.log.Warn("lease checkpoint failed", "leases", len(ids), "error", err)
		l.mu.Lock()
		for _, id := range ids {
			if l.mu.dirty != nil {
				l.mu.dirty[id] = true
			}
		}
		l.mu.Unlock()
		return false
	}
	return true
}

// writeRemaining replicates deadline − now of leases ids, rounded up to the
// millisecond: a successor's deadline (when it saw the entry, which is after now, plus
// the remaining) is never before this leader's. Once applied, those deadlines are
// promised.
func (l *Lessor) writeRemaining(ctx context.Context, ids []int64) error {
	now := time.Now()
	l.mu.Lock()
	cps := make([]fsm.LeaseCheckpoint, 0, len(ids))
	ds := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		if d, ok := l.mu.deadlines[id]; ok {
			ms := (d.Sub(now) + time.Millisecond - 1) / time.Millisecond
			cps = append(cps, fsm.LeaseCheckpoint{ID: id, Remaining: int64(max(ms, 0))})
			ds = append(ds, d)
		}
	}
	term := l.mu.term
	l.mu.Unlock()
	if len(cps) == 0 {
		return nil
	}
	res, err := l.lc.ApplyLeader(ctx, &fsm.Command{Type: fsm.CmdLeaseCheckpoint, Checkpoints: cps})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.term == term && l.mu.promised != nil {
		for i, cp := range cps {
			if ds[i].After(l.mu.promised[cp.ID]) {
				l.mu.promised[cp.ID] = ds[i]
			}
		}
	}
	return nil
}

// keepAlive renews lease id on the leader and returns how long the lease is
// guaranteed to live from now, whatever leader changes come (its promised deadline).
// Without a Raft entry when the promise is at least TTL/2 away; otherwise after a
// renewal entry, batched with the others waiting, and then the promise is the full TTL.
func (l *Lessor) keepAlive(ctx context.Context, id int64) (time.Duration, error) {
	now := time.Now()
	l.mu.Lock()
	if l.mu.deadlines == nil {
		l.mu.Unlock()
		return 0, raft.ErrNotLeader
	}
	c, ok := l.mu.seen[id]
	if !ok {
		// Granted since the last poll, perhaps.
		l.mu.Unlock()
		v, err := l.store.View(ctx, fsm.Serializable)
		if err != nil {
			return 0, err
		}
		l.observe(v, now)
		l.mu.Lock()
		if c, ok = l.mu.seen[id]; !ok || l.mu.deadlines == nil {
			l.mu.Unlock()
			if !ok {
				return 0, fmt.Errorf("lease %d: %w", id, fsm.ErrLeaseNotFound)
			}
			return 0, raft.ErrNotLeader
		}
	}
	l.mu.Unlock()
	if err := l.checkExists(ctx, id); err != nil {
		return 0, err
	}
	l.mu.Lock()
	if l.mu.deadlines == nil {
		l.mu.Unlock()
		return 0, raft.ErrNotLeader
	}
	l.mu.deadlines[id] = now.Add(c.ttl)
	l.mu.dirty[id] = true
	if left := l.mu.promised[id].Sub(now); left >= c.ttl/2 {
		l.mu.Unlock()
		return left, nil
	}
	r := &renewal{id: id, done: make(chan error, 1)}
	l.mu.pending = append(l.mu.pending, r)
	if !l.mu.renewing {
		l.mu.renewing = true
		go l.renewLoop()
	}
	l.mu.Unlock()
	select {
	case err := <-r.done:
		if err != nil {
			return 0, err
		}
		// The entry is applied: a successor's deadline is at least now + TTL.
		return c.ttl - time.Since(now), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// checkExists fails with ErrLeaseNotFound when lease id is gone from the current view
// (revoked or expired since the last poll, which seen still reflects): a keepalive
// never renews what no longer exists.
func (l *Lessor) checkExists(ctx context.Context, id int64) error {
	v, err := l.store.View(ctx, fsm.Serializable)
	if err != nil {
		return err
	}
	if _, ok := v.Lease(id); !ok {
		l.mu.Lock()
		l.forgetLocked(id)
		l.mu.Unlock()
		return fmt.Errorf("lease %d: %w", id, fsm.ErrLeaseNotFound)
	}
	return nil
}

// renewLoop writes the waiting renewals, all in one entry, until none wait: while one
// entry is in flight the next batch gathers (group commit).
func (l *Lessor) renewLoop() {
	for {
		l.mu.Lock()
		batch := l.mu.pending
		l.mu.pending = nil
		if len(batch) == 0 {
			l.mu.renewing = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		ids := make([]int64, 0, len(batch))
		for _, r := range batch {
			ids = append(ids, r.id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.writeRemaining(ctx, ids)
		cancel()
		for _, r := range batch {
			r.done <- err
		}
	}
}

// remaining is the time lease id has left on the leader.
func (l *Lessor) remaining(ctx context.Context, id int64) (time.Duration, error) {
	for try := 0; ; try++ {
		l.mu.Lock()
		if l.mu.deadlines == nil {
			l.mu.Unlock()
			return 0, raft.ErrNotLeader
		}
		d, ok := l.mu.deadlines[id]
		l.mu.Unlock()
		if ok {
			return max(time.Until(d), 0), nil
		}
		if try > 0 {
			return 0, fmt.Errorf("lease %d: %w", id, fsm.ErrLeaseNotFound)
		}
		// Granted since the last poll, perhaps.
		v, err := l.store.View(ctx, fsm.Serializable)
		if err != nil {
			return 0, err
		}
		l.observe(v, time.Now())
	}
}

// Leader calls: a request byte and a lease ID; the answer a status byte (0 ok, 1 no
// such lease) and the time left in milliseconds.
const (
	leaderCallKeepAlive byte = 1
	leaderCallRemaining byte = 2
)

// HandleLeaderCall answers another node's KeepAlive or Remaining on the leader; the
// node installs it with LeaderCaller.SetLeaderHandler.
func (l *Lessor) HandleLeaderCall(ctx context.Context, body []byte) ([]byte, error) {
	if len(body) < 2 {
		return nil, errors.New("lease: bad leader call")
	}
	id, n := binary.Varint(body[1:])
	if n <= 0 {
		return nil, errors.New("lease: bad leader call")
	}
	var left time.Duration
	var err error
	switch body[0] {
	case leaderCallKeepAlive:
		left, err = l.keepAlive(ctx, id)
	case leaderCallRemaining:
		left, err = l.remaining(ctx, id)
	default:
		return nil, fmt.Errorf("lease: unknown leader call %d", body[0])
	}
	if errors.Is(err, fsm.ErrLeaseNotFound) {
		return []byte{1}, nil
	}
	if err != nil {
		return nil, err
	}
	return binary.AppendVarint([]byte{0}, left.Milliseconds()), nil
}

// KeepAlive renews lease id at the leader's lessor and returns the time it has left.
func KeepAlive(ctx context.Context, lc LeaderCaller, id int64) (time.Duration, error) {
	return callLeader(ctx, lc, leaderCallKeepAlive, id)
}

// Remaining asks the leader's lessor how long lease id has left.
func Remaining(ctx context.Context, lc LeaderCaller, id int64) (time.Duration, error) {
	return callLeader(ctx, lc, leaderCallRemaining, id)
}

// callLeader asks the leader's lessor about lease id.
func callLeader(ctx context.Context, lc LeaderCaller, kind byte, id int64) (time.Duration, error) {
	resp, err := lc.CallLeader(ctx, binary.AppendVarint([]byte{kind}, id))
	if err != nil {
		return 0, err
	}
	if len(resp) == 1 && resp[0] == 1 {
		return 0, fmt.Errorf("lease %d: %w", id, fsm.ErrLeaseNotFound)
	}
	if len(resp) < 2 || resp[0] != 0 {
		return 0, errors.New("lease: bad leader call answer")
	}
	ms, n := binary.Varint(resp[1:])
	if n <= 0 {
		return 0, errors.New("lease: bad leader call answer")
	}
	return time.Duration(ms) * time.Millisecond, nil
}
