package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// keyFixture is one real Raft node with the widgets-keymig schema and members that
// announce whatever phase the test says.
type keyFixture struct {
	t       testing.TB
	n       *raft.Node
	schema  *versions.Schema
	k       *versions.KeyMigration
	members []KeyMember
}

func newKeyFixture(t testing.TB) *keyFixture {
	t.Helper()
	s, err := versions.LoadSchema("../versions/testdata/widgets-keymig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k, _ := s.KeyMigrationNamed("widgets-v2-keys")
	f := &keyFixture{t: t, n: openStore(t), schema: s, k: k}
	f.announce(0)
	return f
}

// announce makes all three members report phase p.
func (f *keyFixture) announce(p int) {
	f.members = nil
	for _, id := range []string{"n1", "n2", "n3"} {
		f.members = append(f.members, KeyMember{ID: id, Known: true, Alive: true, Phases: map[string]int{f.k.Name: p}})
	}
}

func (f *keyFixture) apply(ops ...fsm.Op) {
	f.t.Helper()
	for len(ops) > 0 {
		n := min(len(ops), fsm.MaxTxnOps)
		res, err := f.n.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops[:n]}})
		if err != nil || res.Err != nil {
			f.t.Fatalf("apply: %v %v", err, res.Err)
		}
		ops = ops[n:]
	}
}

func (f *keyFixture) seed(n int) {
	f.t.Helper()
	var ops []fsm.Op
	for i := range n {
		ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: []byte(fmt.Sprintf("%sw-%06d", f.k.From, i)),
			Value:    []byte(fmt.Sprintf(`{"apiVersion":"apps/v1","metadata":{"name":"w-%06d"},"spec":{"size":%d}}`, i, i)),
			Encoding: "apps/widgets/v1"})
	}
	f.apply(ops...)
}

func (f *keyFixture) advance(to int) error {
	f.t.Helper()
	_, err := Advance(context.Background(), f.n, f.k, &to, f.members, Transition{By: "test"})
	if err == nil {
		f.announce(to)
	}
	return err
}

func (f *keyFixture) view() *fsm.View { return f.n.Store().View() }

// stepUntilDone steps the leader's work until the work record says Done (and, for a
// rollback, the phase moved), bounded.
func (f *keyFixture) stepUntilDone(m *Migrator) *api.KeyWork {
	f.t.Helper()
	for range 100_000 {
		more, err := m.KeyStep(context.Background(), f.k)
		if err != nil {
			f.t.Fatalf("key step: %v", err)
		}
		if !more {
			w, err := versions.ReadKeyWork(f.view(), f.k.Name)
			if err != nil {
				f.t.Fatal(err)
			}
			return w
		}
	}
	f.t.Fatal("key work never finished")
	return nil
}

func (f *keyFixture) migrator() *Migrator {
	m, err := New(Config{Schema: f.schema, Store: f.n, Rate: -1, Chunk: 50})
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// TestKeyAdvanceRules: every refusal of AdvanceBlocked, each with its reason, and the
// step taken when nothing blocks it.
func TestKeyAdvanceRules(t *testing.T) {
	f := newKeyFixture(t)
	f.seed(3)
	rec := func(p int) *api.KeyPhaseRecord { return &api.KeyPhaseRecord{Name: f.k.Name, Phase: p} }
	two := 2
	lag := []KeyMember{{ID: "a", Known: true, Alive: true, Phases: map[string]int{f.k.Name: 0}},
		{ID: "b", Known: true, Alive: true, Phases: map[string]int{f.k.Name: 1}}}
	old := []KeyMember{{ID: "a", Known: true, Alive: true, Release: "v0.9", Phases: map[string]int{}}}
	f.announce(3)
	at3 := f.members
	f.announce(0)
	dead := []KeyMember{{ID: "a", Known: true, Alive: false, Phases: map[string]int{f.k.Name: 0}}}
	for i, tc := range []struct {
		rec     *api.KeyPhaseRecord
		members []KeyMember
		to      int
		want    string // "" = allowed
	}{
		{rec(0), f.members, 1, ""},
		{rec(0), f.members, 2, "skips phase 1"},
		{rec(0), f.members, 0, "not after"},
		{rec(5), f.members, 6, "last phase"},
		{rec(0), nil, 1, "gossip is off"},
		{rec(0), old, 1, "node a (release v0.9) does not support"},
		{rec(0), lag, 1, "node b applies phase 1, not the current phase 0"},
		{rec(0), dead, 1, "node a is not alive"},
		{&api.KeyPhaseRecord{Name: f.k.Name, Phase: 4, RollbackTo: &two}, f.members, 5, "rollback to phase 2"},
		{rec(3), at3, 4, "3 old keys left without a new key"},
	} {
		got := AdvanceBlocked(f.view(), f.k, tc.rec, tc.members, tc.to)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("#%d: AdvanceBlocked = %q, want %q", i, got, tc.want)
		}
	}
	// 0 → 1 needs an empty new range.
	f.apply(fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.To + "stale"), Value: []byte("{}")})
	if err := f.advance(1); !errors.Is(err, ErrPhaseRefused) || !strings.Contains(err.Error(), "holds 1 keys") {
		t.Fatalf("advance over a non-empty new range = %v", err)
	}
}

// TestKeyCopyDeleteRollback: the copy of phase 3 writes every old key's object (ops
// applied) to the new range and never overwrites a new key a client wrote; a rollback
// from 4 copies phase-4 writes and deletes back; phase 5 deletes every old key and
// then refuses a rollback.
func TestKeyCopyDeleteRollback(t *testing.T) {
	f := newKeyFixture(t)
	const n = 250
	f.seed(n)
	m := f.migrator()
	for p := 1; p <= 3; p++ {
		if err := f.advance(p); err != nil {
			t.Fatalf("advance to %d: %v", p, err)
		}
	}
	// A client's mirrored write in phase 3, before the copy reaches the key.
	mine := `{"apiVersion":"apps/v1","metadata":{"name":"w-000100"},"spec":{"count":999}}`
	f.apply(fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.From + "w-000100"), Value: []byte(`{"spec":{"size":999}}`)},
		fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.To + "w-000100"), Value: []byte(mine)})
	if err := f.advance(4); err == nil || !strings.Contains(err.Error(), "old keys left") {
		t.Fatalf("advance 3 → 4 before the copy = %v, want refused", err)
	}
	w := f.stepUntilDone(m)
	if w.Kind != workCopy || w.State != workDone || w.Left != 0 || w.Written != n-1 {
		t.Fatalf("copy work = %+v, want Done, %d written, 0 left", w, n-1)
	}
	view := f.view()
	if kv, _ := view.Get([]byte(f.k.To+"w-000100"), 0); string(kv.Value) != mine {
		t.Fatalf("the copy overwrote a client's write: %s", kv.Value)
	}
	if kv, _ := view.Get([]byte(f.k.To+"w-000007"), 0); !strings.Contains(string(kv.Value), `"count":7`) || kv.Encoding != "apps/widgets/v1" {
		t.Fatalf("copied w-000007 = %s (%s), want spec.count and the tag", kv.Value, kv.Encoding)
	}
	if err := f.advance(4); err != nil {
		t.Fatal(err)
	}
	// Phase 4 writes (new keys only): an update and a delete.
	f.apply(fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.To + "w-000001"), Value: []byte(`{"apiVersion":"apps/v1","spec":{"count":41}}`)},
		fsm.Op{Type: fsm.OpDelete, Key: []byte(f.k.To + "w-000002")})
	if _, err := Rollback(context.Background(), f.n, f.k, 3, Transition{By: "test"}); err != nil {
		t.Fatalf("rollback 4 → 3: %v", err)
	}
	f.announce(3)
	// The reverse copy, the switch to phase 3, then phase 3's copy, which finds every
	// old key with its new key.
	w = f.stepUntilDone(m)
	if w.Kind != workCopy || w.State != workDone || w.Written != 0 {
		t.Fatalf("the copy after the rollback = %+v, want Done with nothing to copy", w)
	}
	rec, _ := versions.ReadKeyPhase(f.view(), f.k.Name)
	if rec.Phase != 3 || rec.RollbackTo != nil || rec.Last.Kind != "rollback-done" {
		t.Fatalf("after the reverse copy: phase record %+v", rec)
	}
	view = f.view()
	if kv, _ := view.Get([]byte(f.k.From+"w-000001"), 0); !strings.Contains(string(kv.Value), `"size":41`) {
		t.Fatalf("old key of w-000001 after the rollback = %s, want the phase-4 write in the old form", kv.Value)
	}
	if _, err := view.Get([]byte(f.k.From+"w-000002"), 0); !errors.Is(err, fsm.ErrKeyNotFound) {
		t.Fatalf("old key of w-000002, deleted in phase 4, survived the rollback: %v", err)
	}
	for _, p := range []int{4, 5} {
		if err := f.advance(p); err != nil {
			t.Fatalf("advance to %d: %v", p, err)
		}
	}
	w = f.stepUntilDone(m)
	if w.Kind != workDelete || w.State != workDone || !w.DeletionsStarted {
		t.Fatalf("delete work = %+v", w)
	}
	old, nw := CountKeys(f.view(), f.k)
	if old != 0 || nw != n-1 {
		t.Fatalf("after phase 5: %d old keys, %d new keys, want 0 and %d", old, nw, n-1)
	}
	if _, err := Rollback(context.Background(), f.n, f.k, 4, Transition{}); !errors.Is(err, ErrPhaseRefused) ||
		!strings.Contains(err.Error(), "started deleting") {
		t.Fatalf("rollback after deletion = %v", err)
	}
}

// TestKeyRollbackToZeroClearsNewRange: a rollback to 0 deletes the new range in the
// phase's own transaction, so the next phase 1 starts from nothing stale.
func TestKeyRollbackToZeroClearsNewRange(t *testing.T) {
	f := newKeyFixture(t)
	f.seed(5)
	if err := f.advance(1); err != nil {
		t.Fatal(err)
	}
	f.apply(fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.To + "w-000001"), Value: []byte(`{}`)})
	if _, err := Rollback(context.Background(), f.n, f.k, 0, Transition{}); err != nil {
		t.Fatal(err)
	}
	if old, nw := CountKeys(f.view(), f.k); old != 5 || nw != 0 {
		t.Fatalf("after rollback to 0: old %d new %d", old, nw)
	}
	f.announce(0)
	if err := f.advance(1); err != nil {
		t.Fatalf("advance again: %v", err)
	}
}

// TestKeyAutoAdvance: "advance: auto" walks 0 → 4 by itself on the leader (5 only with
// autoFinalize), each step
// only when the rules allow it (3 → 4 after the copy), and not before the phase has
// lasted minDwell.
//
// Kills: an automatic walk that takes phase 5 without autoFinalize.
func TestKeyAutoAdvance(t *testing.T) {
	f := newKeyFixture(t)
	f.seed(120)
	auto := *f.k
	auto.Auto = true
	f.k = &auto
	f.schema.Resources[0].KeyMigration = &auto
	m := f.migrator()
	// Every member applies whatever phase the store holds (as gossip would say).
	m.cfg.KeyMembers = func() []KeyMember {
		rec, _ := versions.ReadKeyPhase(f.view(), auto.Name)
		f.announce(rec.Phase)
		return f.members
	}
	ctx := context.Background()
	phases := []int{0}
	walk := func(until func(phase int) bool) {
		for range 2000 {
			m.stepKeyMigrations(ctx)
			rec, _ := versions.ReadKeyPhase(f.view(), auto.Name)
			if phases[len(phases)-1] != rec.Phase {
				phases = append(phases, rec.Phase)
			}
			if until(rec.Phase) {
				return
			}
		}
	}
	// Without autoFinalize the walk stops in phase 4: phase 5 cannot be undone.
	walk(func(int) bool { return false })
	if fmt.Sprint(phases) != "[0 1 2 3 4]" {
		t.Fatalf("phases walked without autoFinalize = %v, want 0..4 and a stop before 5", phases)
	}
	auto.AutoFinalize = true
	walk(func(p int) bool { old, _ := CountKeys(f.view(), f.k); return p == 5 && old == 0 })
	if fmt.Sprint(phases) != "[0 1 2 3 4 5]" {
		t.Fatalf("phases walked = %v, want every one of 0..5 in order", phases)
	}
	if old, nw := CountKeys(f.view(), f.k); old != 0 || nw != 120 {
		t.Fatalf("after the automatic walk: old %d new %d", old, nw)
	}
	rec, _ := versions.ReadKeyPhase(f.view(), auto.Name)
	if rec.Last == nil || rec.Last.By != "auto (leader)" {
		t.Fatalf("last transition = %+v, want by the leader's automation", rec.Last)
	}

	// A dwell holds the next step back.
	g := newKeyFixture(t)
	slow := *g.k
	slow.Auto, slow.MinDwell = true, time.Hour
	g.k = &slow
	g.schema.Resources[0].KeyMigration = &slow
	if err := g.advance(1); err != nil {
		t.Fatal(err)
	}
	gm := g.migrator()
	gm.cfg.KeyMembers = func() []KeyMember { return g.members }
	for range 5 {
		gm.stepKeyMigrations(ctx)
	}
	if rec, _ := versions.ReadKeyPhase(g.view(), slow.Name); rec.Phase != 1 {
		t.Fatalf("phase %d before the dwell of an hour passed, want 1", rec.Phase)
	}
}

// TestKeyRollbackEveryTarget: every rollback the rules allow, from every phase to every
// earlier one, runs to its target phase and leaves the migration able to go on: the
// new range is empty at phase 0 (else 0 → 1 is refused and the migration is stuck),
// every object is in the old range below phase 4, and the next advance is accepted.
//
//	from  to       how
//	1-3   < from   at once (to 0: the new range deleted in the same transaction)
//	4     0-3      reverse copy, then the phase switch (to 0: the new range deleted)
//	5     4        at once (nothing deleted yet)
//	5     0-3      reverse copy as from 4
func TestKeyRollbackEveryTarget(t *testing.T) {
	const n = 60
	for from := 1; from <= api.KeyPhaseMax; from++ {
		for to := 0; to < from; to++ {
			t.Run(fmt.Sprintf("%d-to-%d", from, to), func(t *testing.T) {
				f := newKeyFixture(t)
				f.seed(n)
				m := f.migrator()
				objects := f.walkTo(m, from)
				if _, err := Rollback(context.Background(), f.n, f.k, to, Transition{By: "test"}); err != nil {
					t.Fatalf("rollback %d → %d: %v", from, to, err)
				}
				f.stepUntilDone(m)
				rec, err := versions.ReadKeyPhase(f.view(), f.k.Name)
				if err != nil || rec.Phase != to || rec.RollbackTo != nil {
					t.Fatalf("after the rollback %d → %d: phase record %+v, %v; want phase %d, no rollback pending", from, to, rec, err, to)
				}
				old, nw := CountKeys(f.view(), f.k)
				if to == api.KeyPhaseOld && nw != 0 {
					t.Errorf("rollback %d → 0 left %d keys in the new range", from, nw)
				}
				if to < api.KeyPhaseNew && old != objects {
					t.Errorf("rollback %d → %d: %d old keys, want every object (%d)", from, to, old, objects)
				}
				f.announce(to)
				if err := f.advance(to + 1); err != nil {
					t.Errorf("advance %d → %d after the rollback from %d: %v", to, to+1, from, err)
				}
			})
		}
	}
}

// walkTo advances a fresh migration to phase p with its work done up to p (the copy of
// phase 3 before 4; nothing deleted in 5), writing one object to both ranges in phase 1
// (a client's mirrored write) and one to the new range only in phase 4, as clients do.
// It returns the number of objects.
func (f *keyFixture) walkTo(m *Migrator, p int) int64 {
	f.t.Helper()
	objects := countRange(f.view(), []byte(f.k.From))
	for q := 1; q <= p; q++ {
		if q == api.KeyPhaseNew {
			f.stepUntilDone(m)
		}
		if err := f.advance(q); err != nil {
			f.t.Fatalf("advance to %d: %v", q, err)
		}
		if q == api.KeyPhaseMirror {
			f.apply(fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.From + "w-mirror"), Value: []byte(`{"spec":{"size":1}}`)},
				fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.To + "w-mirror"),
					Value: []byte(`{"apiVersion":"apps/v1","metadata":{"name":"w-mirror"},"spec":{"count":1}}`)})
			objects++
		}
		if q == api.KeyPhaseNew {
			f.apply(fsm.Op{Type: fsm.OpPut, Key: []byte(f.k.To + "w-new"),
				Value: []byte(`{"apiVersion":"apps/v1","metadata":{"name":"w-new"},"spec":{"count":5}}`)})
			objects++
		}
	}
	return objects
}
