package fsm

import (
	"context"
	"time"
)

// Compaction, one key at a time. A key's history is a newest-first list of versions
// (see version), and compaction has two halves: CmdCompact moves the compact revision
// through Raft, after which no read below it is served, and CompactStep reclaims the
// versions no read at or above the compact revision can see, later and in bounded
// steps, so a compaction of a million versions never holds the write lock for long.
// The compaction queue links the halves: each write that supersedes a version pushes
// (superseding revision, key), in revision order, and CompactStep pops what the compact
// revision has passed. Take key "foo" (versions drawn as mod:value, newest first; a
// tombstone as mod:∅, with create revision 0):
//
//	rev 2  put foo=a   hist 2:a                       queue —
//	rev 5  put foo=b   hist 5:b → 2:a                 queue (5,foo)      2:a superseded at 5
//	rev 7  delete foo  hist 7:∅ → 5:b → 2:a           queue (5,foo) (7,foo)
//	rev 9  put foo=c   hist 9:c → 7:∅ → 5:b → 2:a     queue (5,foo) (7,foo) (9,foo)
//	                   (9:c starts a new life: create 9, version 1)
//
//	compact 6          reads at 6 see 5:b, so 2:a can go; pop (5,foo):
//	                   hist 9:c → 7:∅ → 5:b           queue (7,foo) (9,foo)
//	compact 8          reads at 8 see the tombstone: no read needs 5:b nor 7:∅ itself;
//	                   pop (7,foo):  hist 9:c         queue (9,foo)
//	compact 10         pop (9,foo): 9:c is the newest version at or below 10 and is
//	                   live, so it stays: hist 9:c    queue —
//
// Delete foo again at 11 (hist 11:∅ → 9:c, queue (11,foo)) and compact 12 drops 9:c
// and the tombstone, and foo leaves the tree. Versions are shared with views cloned
// earlier, so trimming copies the kept prefix of a history instead of cutting it in
// place: a view published before compact 8 still holds 9:c → 7:∅ → 5:b. The queue is rebuilt from the histories on
// Restore (snapshots do not carry it), so every replica reclaims the same versions.
//
// Reclaiming is local work, not replicated: each replica runs its own Compactor, and
// replicas may hold different amounts of not-yet-reclaimed history; none of it is
// readable, so they serve the same answers.

// compactLocked records a new compact revision. Reads below it fail at once; the
// superseded versions themselves are reclaimed later, in bounded steps, by CompactStep.
func (s *Store) compactLocked(rev int64) *Result {
	switch {
	case rev <= s.cur.compactRev:
		return &Result{Revision: s.cur.revision, Err: ErrCompacted}
	case rev > s.cur.revision:
		return &Result{Revision: s.cur.revision, Err: ErrFutureRevision}
	}
	s.cur.compactRev = rev
	return &Result{Revision: s.cur.revision, Succeeded: true}
}

// CompactStep processes queued supersessions below the compact revision until it has
// processed max of them or dropped at least max versions, returns how many versions it
// dropped and reports whether more are waiting. Each write that superseded a version
// queued one entry, so the work is proportional to what is removed (plus a B-tree
// lookup per entry), never to the size of the keyspace. The first entry of a key drops
// all of that key's old versions at once, so counting entries alone would let one step
// drop max × (versions per key); it holds the write lock for one short step only, so
// callers interleave it with writes.
func (s *Store) CompactStep(max int) (removed int, more bool) {
	if max <= 0 {
		max = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	touched := false
	for i := 0; i < max && removed < max; i++ {
		p, ok := s.pending.peek()
		if !ok || p.rev >= s.cur.compactRev {
			break // a supersession at the compact revision waits for the next one
		}
		s.pending.pop()
		removed += s.trimLocked(p.key, s.cur.compactRev)
		touched = true
	}
	if touched {
		s.publishLocked()
	}
	p, ok := s.pending.peek()
	return removed, ok && p.rev < s.cur.compactRev
}

// trimLocked drops the versions of key that no read at or after rev can see: every
// version older than the newest one at or below rev, and that one too if it is a
// tombstone below rev. A tombstone at rev itself stays, as etcd keeps it (since
// 3.5.15): a watch may start at the compact revision and is owed that delete. Its
// own queue entry, at rev, reclaims it at a later compaction. It returns how many
// versions it dropped.
func (s *Store) trimLocked(key []byte, rev int64) int {
	e, ok := s.cur.tree.Get(&entry{key: key})
	if !ok {
		return 0
	}
	// Find the newest version at or below rev; everything after it is invisible.
	var keep []*version
	v := e.hist
	for v != nil && v.mod > rev {
		keep = append(keep, v)
		v = v.next
	}
	if v == nil {
		return 0
	}
	dropped := 0
	for o := v.next; o != nil; o = o.next {
		dropped++
	}
	if v.tombstone() && v.mod < rev {
		dropped++
	} else {
		keep = append(keep, v)
	}
	if dropped == 0 {
		return 0
	}
	if len(keep) == 0 {
		s.cur.tree.Delete(e)
		return dropped
	}
	// Copy the kept prefix: its old nodes are shared with views.
	var hist *version
	for i := len(keep) - 1; i >= 0; i-- {
		c := *keep[i]
		c.next = hist
		hist = &c
	}
	s.cur.tree.ReplaceOrInsert(&entry{key: e.key, hist: hist})
	return dropped
}

// compactQueue is a FIFO of (superseding revision, key). Revisions are appended in
// increasing order, so the queue is sorted without any work. It is a list of
// fixed-size blocks: a push or a pop never copies the queue (which holds an entry per
// superseded version, millions under heavy overwrites) while the store lock is held.
type compactQueue struct {
	blocks [][]pendingKey // blocks[0][head:] is the front; only the last block has room
	head   int
	n      int
}

const compactBlock = 4096

type pendingKey struct {
	rev int64
	key []byte
}

// newCompactQueue returns a queue holding items, in order.
func newCompactQueue(items []pendingKey) compactQueue {
	var q compactQueue
	for _, it := range items {
		q.push(it.rev, it.key)
	}
	return q
}

func (q *compactQueue) push(rev int64, key []byte) {
	if len(q.blocks) == 0 || len(q.blocks[len(q.blocks)-1]) == compactBlock {
		q.blocks = append(q.blocks, make([]pendingKey, 0, compactBlock))
	}
	last := len(q.blocks) - 1
	q.blocks[last] = append(q.blocks[last], pendingKey{rev: rev, key: key})
	q.n++
}

func (q *compactQueue) peek() (pendingKey, bool) {
	if q.n == 0 {
		return pendingKey{}, false
	}
	return q.blocks[0][q.head], true
}

func (q *compactQueue) pop() {
	if q.n == 0 {
		return
	}
	q.blocks[0][q.head] = pendingKey{}
	q.head++
	q.n--
	if q.head == len(q.blocks[0]) && (len(q.blocks) > 1 || q.head == compactBlock) {
		q.blocks[0] = nil
		q.blocks = q.blocks[1:]
		q.head = 0
	}
}

func (q *compactQueue) len() int { return q.n }

// compactStepSize and compactDuty pace the reclaiming of compacted history: steps that
// drop about compactStepSize versions (each holds the store's write lock for ~50 µs),
// separated by nineteen times the step's own duration, so compaction takes at most a
// twentieth of a core — every replica reclaims at once, on cores that also serve the
// writes — and a write waits at most one short step. 1M superseded versions take
// about 4 s.
const (
	compactStepSize = 256
	compactDuty     = 19
	compactPoll     = 50 * time.Millisecond
)

// Compactor reclaims a store's compacted history in the background, in bounded, paced
// steps (CompactStep), so that writes are never held up for long. The process that
// owns the store runs one per store; it owns its goroutine until Close.
type Compactor struct {
	store  *Store
	cancel context.CancelFunc
	done   chan struct{}
}

// StartCompactor starts reclaiming s's compacted history: every 50 ms it checks for
// versions below the compact revision and reclaims them at the pace above.
func StartCompactor(s *Store) *Compactor {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Compactor{store: s, cancel: cancel, done: make(chan struct{})}
	go c.run(ctx)
	return c
}

// Close stops the compactor and waits for its step in progress. It is safe to call
// more than once, and on a nil Compactor.
func (c *Compactor) Close() {
	if c == nil {
		return
	}
	c.cancel()
	<-c.done
}

func (c *Compactor) run(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(compactPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for ctx.Err() == nil {
			start := time.Now()
			if _, more := c.store.CompactStep(compactStepSize); !more {
				break
			}
			time.Sleep(max(compactDuty*time.Since(start), 100*time.Microsecond))
		}
	}
}
