package raft

import (
	"io"
	"sync"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// fsmAdapter is the hraft.BatchingFSM over an fsm.Store. It also wakes readers waiting
// for an applied index.
type fsmAdapter struct {
	store *fsm.Store

	mu      sync.Mutex
	applied chan struct{} // closed and replaced after every apply or restore
}

var _ hraft.BatchingFSM = (*fsmAdapter)(nil)

func newFSMAdapter(store *fsm.Store) *fsmAdapter {
	return &fsmAdapter{store: store, applied: make(chan struct{})}
}

func (f *fsmAdapter) Apply(l *hraft.Log) any { return f.ApplyBatch([]*hraft.Log{l})[0] }

// ApplyBatch hands raft's committed entries to the store in one batch (one view publish
// for many writes). Configuration entries advance the applied index only.
func (f *fsmAdapter) ApplyBatch(logs []*hraft.Log) []any {
	entries := make([]fsm.Entry, len(logs))
	for i, l := range logs {
		entries[i] = fsm.Entry{Index: l.Index, Data: l.Data, NoOp: l.Type != hraft.LogCommand}
	}
	results := f.store.ApplyBatch(entries)
	out := make([]any, len(results))
	for i, r := range results {
		if r != nil {
			out[i] = r
		}
	}
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

func (f *fsmAdapter) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	err := f.store.Restore(rc)
	f.notify()
	return err
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
