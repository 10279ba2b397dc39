package fsm

import (
	"bytes"
	"reflect"
	"testing"
)

// TestSnapshotWriterMatchesWriteTo: a stream written key by key from a view's
// histories and leases is byte for byte the stream the store writes itself (format 3,
// no identity, applied index 0), so an import writes nothing a restore would not.
func TestSnapshotWriterMatchesWriteTo(t *testing.T) {
	s := NewStore()
	apply(t, s, &Command{Type: CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60000})
	apply(t, s, txn(put("a", "1"), put("b", "1")))
	apply(t, s, &Command{Type: CmdTxn, Txn: &Txn{Success: []Op{{Type: OpPut, Key: []byte("c"), Value: []byte("x"), Lease: 7, Encoding: "g/r/v1"}}}})
	apply(t, s, txn(del("a")))
	apply(t, s, txn(put("a", "2"), put("b", "2")))
	apply(t, s, &Command{Type: CmdCompact, Revision: 3})

	var want bytes.Buffer
	st := s.Snapshot().st
	st.applied = 0
	if _, err := (&Snapshot{st: st}).WithIdentity("", nil).WriteTo(&want); err != nil {
		t.Fatal(err)
	}
	v := s.View()
	var got bytes.Buffer
	sw := NewSnapshotWriter(&got, v.Revision(), v.CompactRevision())
	v.Histories(func(h KeyHistory) bool { return sw.Key(h) == nil })
	if err := sw.Close(v.Leases()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("SnapshotWriter stream differs from WriteTo:\n got %x\nwant %x", got.Bytes(), want.Bytes())
	}
	// An imported lease was checkpointed at no index of this log.
	leases := v.Leases()
	for i := range leases {
		leases[i].CheckpointIndex = 0
	}
	got.Reset()
	sw = NewSnapshotWriter(&got, v.Revision(), v.CompactRevision())
	v.Histories(func(h KeyHistory) bool { return sw.Key(h) == nil })
	if err := sw.Close(leases); err != nil {
		t.Fatal(err)
	}
	r := NewStore()
	if err := r.Restore(&got); err != nil {
		t.Fatal(err)
	}
	var a, b []KeyHistory
	v.Histories(func(h KeyHistory) bool { a = append(a, h); return true })
	r.View().Histories(func(h KeyHistory) bool { b = append(b, h); return true })
	if !reflect.DeepEqual(a, b) {
		t.Errorf("restored histories %+v, want %+v", b, a)
	}
}
