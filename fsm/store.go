package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/keel-kv/keel/internal/ostree"
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
	lease    int64 // Op.Lease of the put; 0 for none and for tombstones
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

// entryMeasure is what the keyspace tree adds up (count.go): an entry counts when its
// key is live at the latest revision, and its stamp is the revision of its newest
// version, the last revision at which its liveness can have changed.
func entryMeasure(e *entry) (live bool, stamp int64) {
	if e.hist == nil {
		return false, 0
	}
	return !e.hist.tombstone(), e.hist.mod
}

// keyTree is the keyspace: entries in key order, with the live keys of any range
// countable in O(log n) (internal/ostree, count.go).
type keyTree = ostree.Tree[*entry]

func newKeyTree() *keyTree { return ostree.New(btreeDegree, entryLess, entryMeasure) }

// state is everything a View sees; the store publishes a new one after each apply.
type state struct {
	tree       *keyTree
	revision   int64
	compactRev int64
	applied    uint64
	clusterID  string
	secret     []byte
	// encodings counts live keys per encoding tag (never zero entries). The map is
	// immutable once published; countLocked copies it on the first change after.
	encodings map[string]int64
	ls        leaseState // leases and the keys attached to them (lease.go)
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
	// leasesOwned: cur.ls's trees are private to cur; false after a publish, which
	// shares them with the view until a lease write clones them (ownLeasesLocked), so
	// a write that touches no lease clones no lease tree. Guarded by mu.
	leasesOwned bool

	hubPtr atomic.Pointer[hub] // watch fan-out (watch.go); nil until the first Watch
	// slowEnded counts the watches ended with ErrSlowWatcher (SlowWatchersEnded).
	slowEnded atomic.Uint64
	watch     watchState // guarded by mu
}

// NewStore returns an empty store at revision 0.
func NewStore() *Store {
	s := &Store{cur: state{tree: newKeyTree(), ls: newLeaseState()}}
	s.publishLocked()
	return s
}

// publishLocked makes the current state visible to View. Clone is O(1): the tree's
// nodes become shared and the next write copies the nodes on its path.
func (s *Store) publishLocked() {
	st := s.cur
	st.tree = s.cur.tree.Clone()
	st.ls = s.cur.ls.shared()
	s.encOwned, s.leasesOwned = false, false
	s.view.Store(&View{st: st})
	s.flushEventsLocked()
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
	if errors.Is(err, ErrUnknownFormat) {
		// A committed entry of a newer release. The replicas that can read it apply
		// it; skipping it here would make this replica diverge without a word. Stop
		// instead, at every restart, until the node runs a release that reads it.
		panic(fmt.Sprintf("fsm: cannot apply committed log entry %d: %v: this node runs an older release "+
			"than the one that wrote it; upgrade it (see docs/compatibility.md)", index, err))
	}
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
	case CmdLeaseGrant:
		return s.leaseGrantLocked(cmd.LeaseID, cmd.LeaseTTL, cmd.LeaseOwner)
	case CmdLeaseRevoke:
		return s.leaseRevokeLocked(cmd.LeaseIDs)
	case CmdLeaseCheckpoint:
		return s.leaseCheckpointLocked(cmd.Checkpoints)
	default:
		return &Result{Revision: s.cur.revision, Err: ErrInvalidCommand}
	}
}
