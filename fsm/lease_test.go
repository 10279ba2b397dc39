package fsm

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func leasePut(k, v string, lease int64) Op {
	return Op{Type: OpPut, Key: []byte(k), Value: []byte(v), Lease: lease}
}

func grant(id, ttl int64) *Command { return &Command{Type: CmdLeaseGrant, LeaseID: id, LeaseTTL: ttl} }

func revoke(ids ...int64) *Command { return &Command{Type: CmdLeaseRevoke, LeaseIDs: ids} }

func mustApply(t *testing.T, s *Store, cmd *Command) *Result {
	t.Helper()
	res := s.ApplyCommand(s.AppliedIndex()+1, cmd)
	if res.Err != nil {
		t.Fatalf("apply %+v: %v", cmd, res.Err)
	}
	return res
}

func keysOf(bs [][]byte) []string {
	var out []string
	for _, b := range bs {
		out = append(out, string(b))
	}
	return out
}

// TestLeaseAttachDetachRevoke draws one lease's life:
//
//	rev 1  put a(lease 7) b(lease 7) c        attached(7) = {a, b}
//	rev 2  put b (no lease)                   attached(7) = {a}      (a put detaches)
//	rev 3  put d(lease 7)                     attached(7) = {a, d}
//	rev 4  revoke 7: delete a, d              c and b stay; lease gone
func TestLeaseAttachDetachRevoke(t *testing.T) {
	s := NewStore()
	mustApply(t, s, grant(7, 5000))
	if l, ok := s.View().Lease(7); !ok || l.TTL != 5000 || l.Remaining != 5000 || l.CheckpointIndex != 1 {
		t.Fatalf("lease after grant = %+v, %v", l, ok)
	}
	mustApply(t, s, txn(leasePut("a", "1", 7), leasePut("b", "1", 7), put("c", "1")))
	if got := keysOf(s.View().LeaseKeys(7, 0)); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("attached = %v", got)
	}
	mustApply(t, s, txn(put("b", "2")))
	mustApply(t, s, txn(leasePut("d", "1", 7)))
	if got := keysOf(s.View().LeaseKeys(7, 0)); !reflect.DeepEqual(got, []string{"a", "d"}) {
		t.Fatalf("attached = %v", got)
	}
	if kv, _ := s.View().Get([]byte("a"), 0); kv.Lease != 7 {
		t.Fatalf("a.Lease = %d", kv.Lease)
	}
	w, err := s.Watch(WatchOptions{Key: []byte{}, End: []byte{}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res := mustApply(t, s, revoke(7))
	if res.Revision != 4 || !res.Succeeded || res.Responses[0].Deleted != 2 {
		t.Fatalf("revoke result = %+v", res)
	}
	v := s.View()
	for _, k := range []string{"a", "d"} {
		if _, err := v.Get([]byte(k), 0); !errors.Is(err, ErrKeyNotFound) {
			t.Errorf("%s after revoke: %v", k, err)
		}
	}
	for _, k := range []string{"b", "c"} {
		if _, err := v.Get([]byte(k), 0); err != nil {
			t.Errorf("%s after revoke: %v", k, err)
		}
	}
	if _, ok := v.Lease(7); ok || len(v.LeaseKeys(7, 0)) != 0 {
		t.Fatal("lease 7 survived its revoke")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups, err := w.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Revision != 4 || len(groups[0].Events) != 2 ||
		groups[0].Events[0].Type != EventDelete || groups[0].Events[1].Type != EventDelete {
		t.Fatalf("watch saw %+v, want both deletes in revision 4", groups)
	}
	// Revoking again, or an unknown lease, changes nothing.
	if res := mustApply(t, s, revoke(7, 99)); res.Succeeded || res.Revision != 4 {
		t.Fatalf("second revoke = %+v", res)
	}
}

func TestLeaseRefusals(t *testing.T) {
	s := NewStore()
	mustApply(t, s, grant(1, MinLeaseTTL))
	h := s.View().Hash()
	for i, tc := range []struct {
		cmd  *Command
		want error
	}{
		{txn(put("x", "1"), leasePut("a", "1", 2)), ErrLeaseNotFound},
		{grant(1, 2000), ErrLeaseExists},
		{grant(0, 2000), ErrInvalidCommand},
		{grant(-3, 2000), ErrInvalidCommand},
		{grant(2, MinLeaseTTL-1), ErrInvalidCommand},
		{grant(2, MaxLeaseTTL+1), ErrInvalidCommand},
		{grant(2, -1), ErrInvalidCommand},
		{txn(Op{Type: OpDelete, Key: []byte("a"), Lease: 1}), ErrInvalidCommand},
		{txn(leasePut("a", "1", -1)), ErrInvalidCommand},
	} {
		res := s.ApplyCommand(s.AppliedIndex()+1, tc.cmd)
		if !errors.Is(res.Err, tc.want) {
			t.Errorf("#%d: err = %v, want %v", i, res.Err, tc.want)
		}
		if s.View().Hash() != h {
			t.Fatalf("#%d: a refused command changed state", i)
		}
	}
	// The failure branch is checked only when it runs.
	res := mustApply(t, s, &Command{Type: CmdTxn, Txn: &Txn{
		Compares: []Compare{{Key: []byte("nope"), Target: TargetExists, Result: CompareEqual, Int: 1}},
		Success:  []Op{leasePut("a", "1", 42)},
		Failure:  []Op{leasePut("b", "1", 1)},
	}})
	if res.Succeeded || len(s.View().LeaseKeys(1, 0)) != 1 {
		t.Fatalf("failure branch with a live lease: %+v", res)
	}
}

// TestLeaseCheckpoint: a checkpoint sets Remaining (clamped to [0, TTL]) and the
// CheckpointIndex of the leases that exist, skips the others, writes no revision.
func TestLeaseCheckpoint(t *testing.T) {
	s := NewStore()
	mustApply(t, s, grant(1, 10000))
	mustApply(t, s, grant(2, 10000))
	rev := s.Revision()
	res := mustApply(t, s, &Command{Type: CmdLeaseCheckpoint, Checkpoints: []LeaseCheckpoint{
		{ID: 1, Remaining: 4000}, {ID: 2, Remaining: 99999}, {ID: 3, Remaining: 1}}})
	if res.Succeeded || res.Revision != rev {
		t.Fatalf("checkpoint result = %+v", res)
	}
	v := s.View()
	if l, _ := v.Lease(1); l.Remaining != 4000 || l.CheckpointIndex != 3 {
		t.Errorf("lease 1 = %+v", l)
	}
	if l, _ := v.Lease(2); l.Remaining != 10000 {
		t.Errorf("lease 2 = %+v, want remaining clamped to TTL", l)
	}
	mustApply(t, s, &Command{Type: CmdLeaseCheckpoint, Checkpoints: []LeaseCheckpoint{{ID: 1, Remaining: -5}}})
	if l, _ := s.View().Lease(1); l.Remaining != 0 || l.CheckpointIndex != 4 {
		t.Errorf("lease 1 = %+v, want remaining clamped to 0", l)
	}
	if got := len(s.View().Leases()); got != 2 {
		t.Errorf("%d leases", got)
	}
}

func TestLeaseSnapshotRoundTrip(t *testing.T) {
	s := NewStore()
	mustApply(t, s, grant(5, 3000))
	mustApply(t, s, grant(9, 60000))
	mustApply(t, s, txn(leasePut("a", "1", 5), leasePut("b", "1", 9), put("c", "1")))
	mustApply(t, s, &Command{Type: CmdLeaseCheckpoint, Checkpoints: []LeaseCheckpoint{{ID: 9, Remaining: 1234}}})
	r := restoredCopy(t, s)
	if r.View().Hash() != s.View().Hash() || !reflect.DeepEqual(r.View().Leases(), s.View().Leases()) {
		t.Fatalf("restored leases %+v, want %+v", r.View().Leases(), s.View().Leases())
	}
	if got := keysOf(r.View().LeaseKeys(9, 0)); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("restored attachments of 9 = %v", got)
	}
	// The rebuilt index works: revoking 5 deletes a.
	mustApply(t, r, revoke(5))
	if _, err := r.View().Get([]byte("a"), 0); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("a after revoke on the restored store: %v", err)
	}
}

func TestLeaseCommandFormat(t *testing.T) {
	for i, tc := range []struct {
		cmd  *Command
		want byte
	}{
		{txn(put("a", "1")), CommandFormatV1},
		{txn(Op{Type: OpPut, Key: []byte("a"), Encoding: "g/r/v1"}), CommandFormatV2},
		{txn(leasePut("a", "1", 3)), CommandFormatV3},
		{grant(1, 1000), CommandFormatV3},
		{revoke(1, 2), CommandFormatV3},
		{&Command{Type: CmdLeaseCheckpoint, Checkpoints: []LeaseCheckpoint{{1, 2}}}, CommandFormatV3},
	} {
		b, err := EncodeCommand(tc.cmd)
		if err != nil || b[0] != tc.want {
			t.Errorf("#%d: format = %d (%v), want %d", i, b[0], err, tc.want)
			continue
		}
		got, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(got, tc.cmd) {
			t.Errorf("#%d: round trip = %+v, %v", i, got, err)
		}
	}
	// A lease command claiming an older format is corrupt, not applied.
	b, _ := EncodeCommand(grant(1, 1000))
	b[0] = CommandFormatV2
	if _, err := DecodeCommand(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lease command in format 2: %v", err)
	}
}

// TestSnapshotFormatWithoutLeases: a store that never granted a lease writes format 2,
// which the previous release restores; the first grant switches to format 3.
func TestSnapshotFormatWithoutLeases(t *testing.T) {
	s := NewStore()
	mustApply(t, s, txn(put("a", "1")))
	format := func() byte {
		var buf bytes.Buffer
		s.Snapshot().WriteTo(&buf)
		r := NewStore()
		if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil || r.View().Hash() != s.View().Hash() {
			t.Fatalf("round trip: %v", err)
		}
		return buf.Bytes()[len(snapshotMagic)]
	}
	if f := format(); f != snapshotFormatV2 {
		t.Fatalf("format %d without leases, want 2", f)
	}
	mustApply(t, s, grant(1, 1000))
	mustApply(t, s, revoke(1))
	if f := format(); f != snapshotFormatV3 {
		t.Fatalf("format %d after a grant, want 3", f)
	}
}

// TestLeaseGen: a view's LeaseGen moves with every change to the leases (grant,
// checkpoint, revoke, restore) and with nothing else, so an observer may skip a view
// whose gen it has seen.
func TestLeaseGen(t *testing.T) {
	s := NewStore()
	gens := []uint64{s.View().LeaseGen()}
	moved := func(what string, want bool) {
		t.Helper()
		g := s.View().LeaseGen()
		if got := g != gens[len(gens)-1]; got != want {
			t.Fatalf("%s: gen %d after %v, moved %v, want %v", what, g, gens, got, want)
		}
		gens = append(gens, g)
	}
	mustApply(t, s, grant(7, 5000))
	moved("grant", true)
	mustApply(t, s, &Command{Type: CmdTxn, Txn: &Txn{Success: []Op{{Type: OpPut, Key: []byte("k"), Value: []byte("v")}}}})
	moved("a put without lease", false)
	mustApply(t, s, &Command{Type: CmdLeaseCheckpoint, Checkpoints: []LeaseCheckpoint{{ID: 7, Remaining: 3000}}})
	moved("checkpoint", true)
	mustApply(t, s, revoke(7))
	moved("revoke", true)
	mustApply(t, s, grant(8, 5000))
	mustApply(t, s, grant(9, 5000))
	if ids, ok := s.View().LeaseChangesSince(gens[1]); !ok || !reflect.DeepEqual(ids, []int64{7, 7, 8, 9}) {
		t.Fatalf("changes since the grant of 7 = %v, %v; want 7 (checkpoint), 7 (revoke), 8, 9", ids, ok)
	}
	if _, ok := s.View().LeaseChangesSince(s.View().LeaseGen() + 1); ok {
		t.Fatal("changes since a gen after the view's")
	}
	moved("two grants", true)
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	moved("restore", true)
	if _, ok := s.View().LeaseChangesSince(gens[len(gens)-2]); ok {
		t.Fatal("a restored store reports the changes of the state before it")
	}
}
