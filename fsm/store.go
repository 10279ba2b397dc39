package fsm

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
)

// btreeDegree trades node copy cost on copy-on-write against tree depth; 32 keeps a
// node's items in a few cache lines and a million keys four levels deep.
const btreeDegree = 32

// version is one immutable version of a key. A key's history is a newest-first linked
// list of versions; lists are shared between the store and every view cloned from it,
// so a version is never modified after it is linked in.
type version struct {
	value    []byte
	encoding string // Op.Encoding of the put; "" for untagged values and tombstones
	create   int64  // CreateRevision; 0 marks a tombstone (the key was deleted at mod)
	mod      int64
	version  int64
	next     *version
}

func (v *version) tombstone() bool { return v.create == 0 }

// entry is one key in the tree. Entries are replaced, never modified, when the key's
// history changes, because older tree clones still point at them.
type entry struct {
	key  []byte
	hist *version
}

func entryLess(a, b *entry) bool { return bytes.Compare(a.key, b.key) < 0 }

// state is everything a View sees; the store publishes a new one after each apply.
type state struct {
	tree       *btree.BTreeG[*entry]
	revision   int64
	compactRev int64
	applied    uint64
	clusterID  string
	secret     []byte
	// encodings counts live keys per encoding tag (never zero entries). The map is
	// immutable once published; countLocked copies it on the first change after.
	encodings map[string]int64
}

// Store is keel's MVCC state machine: a copy-on-write B-tree of key histories with one
// global revision. Apply, ApplyBatch, Restore and CompactStep are serialized with each
// other (raft's FSM goroutine and the compactor call them); View never waits for them.
type Store struct {
	mu  sync.Mutex
	cur state // owned by mu; cur.tree is mutated in place (copy-on-write against views)

	// pending is the compaction queue: keys whose older versions were superseded, in
	// order of the superseding revision. CompactStep pops it up to the compact revision.
	pending compactQueue

	view atomic.Pointer[View] // the latest published view

	encOwned bool // cur.encodings is private to cur (not yet published); guarded by mu
}

// NewStore returns an empty store at revision 0.
func NewStore() *Store {
	s := &Store{cur: state{tree: btree.NewG(btreeDegree, entryLess)}}
	s.publishLocked()
	return s
}

// publishLocked makes the current state visible to View. Clone is O(1): the tree's
// nodes become shared and the next write copies the nodes on its path.
func (s *Store) publishLocked() {
	st := s.cur
	st.tree = s.cur.tree.Clone()
	s.encOwned = false
	s.view.Store(&View{st: st})
}

// View returns an immutable view of the latest applied state in O(1). It stays valid
// and consistent however long it is held, while writes go on.
func (s *Store) View() *View { return s.view.Load() }

// Revision is the latest revision (the revision of the last write transaction).
func (s *Store) Revision() int64 { return s.View().st.revision }

// CompactRevision is the revision up to which history is compacted.
func (s *Store) CompactRevision() int64 { return s.View().st.compactRev }

// AppliedIndex is the Raft log index of the last applied entry.
func (s *Store) AppliedIndex() uint64 { return s.View().st.applied }

// ClusterMeta returns the replicated cluster ID and secret; ok is false until the
// first CmdClusterMeta has been applied.
func (s *Store) ClusterMeta() (clusterID string, secret []byte, ok bool) {
	st := s.View().st
	return st.clusterID, st.secret, st.secret != nil
}

// Entry is one committed Raft log entry for ApplyBatch.
type Entry struct {
	Index uint64
	Data  []byte
	// NoOp marks an entry that is not a command (a Raft configuration change): it only
	// advances the applied index, so that reads waiting for that index are released.
	NoOp bool
}

// Apply decodes and applies one committed log entry at index. It never panics on bad
// bytes: an entry that does not decode yields a Result with Err set and changes nothing
// but the applied index.
func (s *Store) Apply(index uint64, data []byte) *Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.applyLocked(index, data)
	s.publishLocked()
	return res
}

// ApplyBatch applies entries in order and publishes one view at the end, so a batch of
// concurrent writes costs one tree clone. The result of a NoOp entry is nil.
func (s *Store) ApplyBatch(entries []Entry) []*Result {
	out := make([]*Result, len(entries))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range entries {
		if e.NoOp {
			s.cur.applied = max(s.cur.applied, e.Index)
			continue
		}
		out[i] = s.applyLocked(e.Index, e.Data)
	}
	s.publishLocked()
	return out
}

// ApplyCommand applies an already-decoded command at index (tests and tools).
func (s *Store) ApplyCommand(index uint64, cmd *Command) *Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index > s.cur.applied {
		s.cur.applied = index
	}
	res := s.execLocked(cmd)
	s.publishLocked()
	return res
}

func (s *Store) applyLocked(index uint64, data []byte) *Result {
	if index > s.cur.applied {
		s.cur.applied = index
	}
	cmd, err := DecodeCommand(data)
	if err != nil {
		return &Result{Revision: s.cur.revision, Err: err}
	}
	return s.execLocked(cmd)
}

func (s *Store) execLocked(cmd *Command) *Result {
	switch cmd.Type {
	case CmdTxn:
		return s.txnLocked(cmd.Txn)
	case CmdCompact:
		return s.compactLocked(cmd.Revision)
	case CmdClusterMeta:
		if s.cur.secret == nil && len(cmd.Secret) > 0 {
			s.cur.clusterID = cmd.ClusterID
			s.cur.secret = append([]byte(nil), cmd.Secret...)
		}
		return &Result{Revision: s.cur.revision, Succeeded: true}
	default:
		return &Result{Revision: s.cur.revision, Err: ErrInvalidCommand}
	}
}

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
		if !ok || p.rev > s.cur.compactRev {
			break
		}
		s.pending.pop()
		removed += s.trimLocked(p.key, s.cur.compactRev)
		touched = true
	}
	if touched {
		s.publishLocked()
	}
	p, ok := s.pending.peek()
	return removed, ok && p.rev <= s.cur.compactRev
}

// trimLocked drops the versions of key that no read at or after rev can see: every
// version older than the newest one at or below rev, and that one too if it is a
// tombstone. It returns how many versions it dropped.
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
	if v.tombstone() {
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
