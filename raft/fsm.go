package raft

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// fsmAdapter is the hraft.BatchingFSM over an fsm.Store. It also wakes readers waiting
// for an applied index.
type fsmAdapter struct {
	store *fsm.Store
	log   hclog.Logger
	obs   Observer
	// refused counts the stale snapshots refused (tests).
	refused atomic.Uint64

	mu      sync.Mutex
	applied chan struct{} // closed and replaced after every apply or restore
}

var _ hraft.BatchingFSM = (*fsmAdapter)(nil)

func newFSMAdapter(store *fsm.Store, log hclog.Logger, obs Observer) *fsmAdapter {
	if obs == nil {
		obs = nopObserver{}
	}
	return &fsmAdapter{store: store, log: log, obs: obs, applied: make(chan struct{})}
}

func (f *fsmAdapter) Apply(l *hraft.Log) any { return f.ApplyBatch([]*hraft.Log{l})[0] }

// ApplyBatch hands raft's committed entries to the store in one batch (one view publish
// for many writes). Configuration entries advance the applied index only. An entry at
// or below the store's applied index is in the state already and is skipped (its
// result is nil): raft hands such entries again after Restore refused a stale
// snapshot, because it moved its own applied index back to the snapshot's.
func (f *fsmAdapter) ApplyBatch(logs []*hraft.Log) []any {
	applied := f.store.AppliedIndex()
	entries := make([]fsm.Entry, 0, len(logs))
	at := make([]int, 0, len(logs)) // entries[j] is logs[at[j]]
	for i, l := range logs {
		if l.Index <= applied {
			continue
		}
		entries = append(entries, fsm.Entry{Index: l.Index, Data: l.Data, NoOp: l.Type != hraft.LogCommand})
		at = append(at, i)
	}
	out := make([]any, len(logs))
	if len(entries) == 0 {
		return out
	}
	start := time.Now()
	for j, r := range f.store.ApplyBatch(entries) {
		if r != nil {
			out[at[j]] = r
		}
	}
	f.obs.BatchApplied(len(entries), time.Since(start))
	f.notify()
	return out
}

func (f *fsmAdapter) notify() {
	f.mu.Lock()
	close(f.applied)
	f.applied = make(chan struct{})
	f.mu.Unlock()
}

// appliedCh returns a channel closed at the next apply.
func (f *fsmAdapter) appliedCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

func (f *fsmAdapter) Snapshot() (hraft.FSMSnapshot, error) {
	return &fsmSnapshot{snap: f.store.Snapshot()}, nil
}

// Restore installs a snapshot raft hands over: at startup (into an empty store), from
// the leader (InstallSnapshot) or from an operator (Raft.Restore, see RestoreSnapshot).
// It refuses one older than the store's state and returns nil, leaving the state as
// it is: no acknowledged write disappears here and no revision goes backwards.
//
// Why: hashicorp/raft v1.8.0 installs whatever snapshot the leader sends.
// installSnapshot (raft.go:1837) checks the request's term only; it never compares
// req.LastLogIndex with its own lastApplied before restoring the FSM (raft.go:1936)
// and then sets lastApplied back to it (raft.go:1954). And a leader does send an
// older one: when a follower rejects an append because it lacks the previous entry
// (raft.go:1503), the leader steps nextIndex back one entry per rejection
// (replication.go:256), past its own first log entry, and then sends its latest
// snapshot whatever the follower applied (replication.go:223, 299). A follower lacks
// the entries below its own last snapshot when it holds more than TrailingLogs
// uncommitted entries past it (compaction keeps min(snapshot, last-TrailingLogs),
// snapshot.go:235): a leader cut off from the majority that kept appending and then
// snapshotted. The new leader's latest snapshot is older than what the old one
// applied, and the old leader, now a follower, went back to it
// (TestStaleSnapshotNotInstalled). Related upstream: hashicorp/raft#697 and #704
// (the livelock of that InstallSnapshot loop), #85 (a restart that falls back to an
// older snapshot), #248 (lastSnapshotIndex going back).
//
// Restore judges a snapshot by the raft index it is installed at, which raft puts in
// its metadata (snapshotStore hands it over), not by the revision it carries: an
// operator's restore brings back an older revision on purpose, and raft gives it an
// index past its whole log (raft.go:1139-1144), so it is never refused. Refusing is
// returning nil, not an error: with an error the leader would send the same snapshot
// again and again, and Raft.Restore would panic. Raft then believes the snapshot's
// index applied; the entries it hands again after it are skipped (ApplyBatch).
func (f *fsmAdapter) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	meta, ok := snapshotMetaOf(rc)
	var err error
	if ok {
		err = f.store.RestoreAt(rc, meta.Index)
	} else {
		err = f.store.Restore(rc)
	}
	if errors.Is(err, fsm.ErrStaleSnapshot) {
		f.refused.Add(1)
		f.log.Warn("refused to install a snapshot older than the applied state", "snapshot", meta.ID,
			"index", meta.Index, "term", meta.Term, "applied", f.store.AppliedIndex())
		return nil
	}
	f.notify()
	return err
}

// snapshotStore is raft's snapshot store, but the reader Open returns carries the
// snapshot's metadata, so that fsmAdapter.Restore learns the index raft installs it
// at. Every restore of the FSM opens the snapshot here first: at startup
// (api.go:705), runFSM (fsm.go:190) for InstallSnapshot and Raft.Restore.
type snapshotStore struct{ hraft.SnapshotStore }

func (s snapshotStore) Open(id string) (*hraft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return nil, nil, err
	}
	return meta, &metaReader{ReadCloser: rc, meta: *meta}, nil
}

type metaReader struct {
	io.ReadCloser
	meta hraft.SnapshotMeta
}

// snapshotMetaOf finds the metadata of the snapshot rc reads, through raft's
// wrappers (hraft.ReadCloserWrapper, added for this in hashicorp/raft#501).
func snapshotMetaOf(rc io.ReadCloser) (*hraft.SnapshotMeta, bool) {
	for range 8 {
		switch r := rc.(type) {
		case *metaReader:
			return &r.meta, true
		case hraft.ReadCloserWrapper:
			rc = r.WrappedReadCloser()
		default:
			return nil, false
		}
	}
	return nil, false
}

// fsmSnapshot streams a store snapshot into raft's snapshot sink while writes go on.
type fsmSnapshot struct{ snap *fsm.Snapshot }

func (s *fsmSnapshot) Persist(sink hraft.SnapshotSink) error {
	if _, err := s.snap.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
