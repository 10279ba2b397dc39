package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func ownedGrant(id, ttl int64, owner string) *Command {
	return &Command{Type: CmdLeaseGrant, LeaseID: id, LeaseTTL: ttl, LeaseOwner: owner}
}

// TestLeaseOwnerCommandFormat: a grant with an owner is format 5, byte for byte as
// lease_codec.go draws it; a grant without one stays format 3; a format-5 grant
// without owner and a format-4 reader's view of format 5 are refused.
func TestLeaseOwnerCommandFormat(t *testing.T) {
	b, err := EncodeCommand(ownedGrant(7, 10000, "p:a"))
	want := []byte{0x05, 0x04, 0x0e, 0xa0, 0x9c, 0x01, 0x03, 'p', ':', 'a'}
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("owned grant = % x (%v), want % x", b, err, want)
	}
	if back, err := DecodeCommand(b); err != nil || !reflect.DeepEqual(back, ownedGrant(7, 10000, "p:a")) {
		t.Fatalf("owned grant decodes to %+v, %v", back, err)
	}
	if b, _ := EncodeCommand(grant(7, 10000)); b[0] != CommandFormatV3 {
		t.Errorf("grant without owner in format %d, want 3", b[0])
	}
	empty := []byte{0x05, 0x04, 0x0e, 0xa0, 0x9c, 0x01, 0x00}
	if _, err := DecodeCommand(empty); !errors.Is(err, ErrCorrupt) {
		t.Errorf("format-5 grant with an empty owner: %v, want ErrCorrupt", err)
	}
	if _, err := DecodeCommand(want[:len(want)-1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated owner: %v, want ErrCorrupt", err)
	}
}

// TestLeaseOwnerApply: the owner is kept from the grant on, through checkpoints, and
// goes with the lease; an owner over MaxLeaseOwner is refused, nothing changed.
func TestLeaseOwnerApply(t *testing.T) {
	s := NewStore()
	mustApply(t, s, ownedGrant(7, 5000, "p:a"))
	mustApply(t, s, &Command{Type: CmdLeaseCheckpoint, Checkpoints: []LeaseCheckpoint{{ID: 7, Remaining: 100}}})
	if l, ok := s.View().Lease(7); !ok || l.Owner != "p:a" || l.Remaining != 100 {
		t.Fatalf("lease 7 after a checkpoint = %+v, %v; want owner p:a", l, ok)
	}
	res := s.ApplyCommand(s.AppliedIndex()+1, ownedGrant(8, 5000, strings.Repeat("x", MaxLeaseOwner+1)))
	if !errors.Is(res.Err, ErrInvalidCommand) {
		t.Fatalf("grant with a long owner: %v, want ErrInvalidCommand", res.Err)
	}
	if _, ok := s.View().Lease(8); ok {
		t.Fatal("lease 8 granted with a refused owner")
	}
	mustApply(t, s, revoke(7))
	mustApply(t, s, grant(7, 5000))
	if l, _ := s.View().Lease(7); l.Owner != "" {
		t.Fatalf("lease 7 granted again without owner has owner %q", l.Owner)
	}
}

// TestLeaseOwnerSnapshot: owners survive a snapshot and restore (format 4); while no
// lease has one, snapshots stay format 3, which v0.9.0 restores, and format 4 is only
// written while an owned lease lives.
func TestLeaseOwnerSnapshot(t *testing.T) {
	s := NewStore()
	roundTrip := func() (*Store, byte) {
		t.Helper()
		var buf bytes.Buffer
		if _, err := s.Snapshot().WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		r := NewStore()
		if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatalf("restore: %v", err)
		}
		return r, buf.Bytes()[len(snapshotMagic)]
	}
	mustApply(t, s, grant(1, 5000))
	if _, f := roundTrip(); f != snapshotFormatV3 {
		t.Fatalf("format %d with an ownerless lease, want 3", f)
	}
	mustApply(t, s, ownedGrant(2, 5000, "p:a\nb"))
	mustApply(t, s, txn(leasePut("k", "v", 2)))
	r, f := roundTrip()
	if f != snapshotFormatV4 {
		t.Fatalf("format %d with an owned lease, want 4", f)
	}
	if !reflect.DeepEqual(r.View().Leases(), s.View().Leases()) {
		t.Fatalf("restored leases %+v, want %+v", r.View().Leases(), s.View().Leases())
	}
	if l, _ := r.View().Lease(2); l.Owner != "p:a\nb" {
		t.Fatalf("restored owner %q", l.Owner)
	}
	mustApply(t, s, revoke(2))
	if _, f := roundTrip(); f != snapshotFormatV3 {
		t.Fatalf("format %d once the owned lease is gone, want 3", f)
	}
}
