package raft

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// TestFSMRefusesStaleSnapshotAndSkipsReplayedEntries: the adapter refuses a snapshot
// installed below its applied index (and says nil to raft), and then skips the entries
// raft hands again from the snapshot's index on, which are in the state already.
func TestFSMRefusesStaleSnapshotAndSkipsReplayedEntries(t *testing.T) {
	f := newFSMAdapter(fsm.NewStore(), hclog.NewNullLogger(), nil)
	entry := func(i uint64) *hraft.Log {
		data, err := fsm.EncodeCommand(putCmd(fmt.Sprint("k", i), "v"))
		if err != nil {
			t.Fatal(err)
		}
		return &hraft.Log{Index: i, Type: hraft.LogCommand, Data: data}
	}
	batch := func(from, to uint64) []*hraft.Log {
		var logs []*hraft.Log
		for i := from; i <= to; i++ {
			logs = append(logs, entry(i))
		}
		return logs
	}
	f.ApplyBatch(batch(1, 3))
	var snap bytes.Buffer
	if _, err := f.store.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(batch(4, 6))
	h := f.store.View().Hash()

	// Through raft's wrappers, as runFSM hands it over.
	rc := &metaReader{ReadCloser: io.NopCloser(bytes.NewReader(snap.Bytes())), meta: hraft.SnapshotMeta{ID: "s", Index: 3}}
	if err := f.Restore(wrapped{rc}); err != nil {
		t.Fatalf("stale restore: %v, want nil (refused quietly)", err)
	}
	if f.store.View().Hash() != h || f.store.AppliedIndex() != 6 {
		t.Fatalf("stale restore changed the state (applied %d)", f.store.AppliedIndex())
	}
	out := f.ApplyBatch(batch(4, 8)) // raft replays from the snapshot's index
	if out[0] != nil || out[2] != nil || out[3] == nil {
		t.Fatalf("results %v: want nil for the replayed entries 4-6, a result for 7", out)
	}
	if rev := f.store.Revision(); rev != 8 {
		t.Fatalf("revision %d after replay, want 8 (replayed entries applied twice?)", rev)
	}

	// A snapshot at a newer index (an operator's restore) replaces the state.
	rc = &metaReader{ReadCloser: io.NopCloser(bytes.NewReader(snap.Bytes())), meta: hraft.SnapshotMeta{ID: "u", Index: 20}}
	if err := f.Restore(wrapped{rc}); err != nil {
		t.Fatal(err)
	}
	if f.store.AppliedIndex() != 20 || f.store.Revision() != 3 {
		t.Fatalf("after a restore at index 20: applied %d, revision %d, want 20, 3", f.store.AppliedIndex(), f.store.Revision())
	}
}

// wrapped is a hraft.ReadCloserWrapper, as raft's progress counter is.
type wrapped struct{ io.ReadCloser }

func (w wrapped) WrappedReadCloser() io.ReadCloser { return w.ReadCloser }
