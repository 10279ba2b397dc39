package versions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/raft/rafttest"
)

// openStore starts a real one-node Raft cluster on loopback with its data in a temp dir.
func openStore(t *testing.T) *raft.Node { return rafttest.Single(t, "store") }

// hookStore runs before() once, just before the first Apply whose command matches,
// so a test can slip another node's write between a read and a compare-and-swap.
type hookStore struct {
	Store
	once   sync.Once
	match  func(*fsm.Command) bool
	before func()
}

func (h *hookStore) Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if h.match == nil || h.match(cmd) {
		h.once.Do(h.before)
	}
	return h.Store.Apply(ctx, cmd)
}

func mustSchema(t *testing.T, file string) *Schema {
	t.Helper()
	s, err := LoadSchema("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newManager(t *testing.T, id string, s *Schema, store Store, members func() []Member) *Manager {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Incarnation, cfg.Schema, cfg.Store, cfg.Members = id, uint64(len(id)), s, store, members
	cfg.GCAfter = time.Second
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func alive(ids ...string) func() []Member {
	return func() []Member {
		var out []Member
		for _, id := range ids {
			out = append(out, Member{ID: id, Alive: true})
		}
		return out
	}
}

// TestRegisterConcurrently: five nodes register at once against one store; every
// compare-and-swap that loses retries, and no entry is lost.
func TestRegisterConcurrently(t *testing.T) {
	store := openStore(t)
	ids := []string{"n1", "n2", "n3", "n4", "n5"}
	schemas := map[string]*Schema{}
	var members []Member // as gossip shows them: alive, announcing their decodable versions
	for i, id := range ids {
		schemas[id] = mustSchema(t, "widgets-v1v2.yaml")
		if i == 0 {
			schemas[id] = mustSchema(t, "widgets-v1.yaml")
		}
		members = append(members, Member{ID: id, Alive: true,
			Decodable: map[string][]string{"apps/widgets": schemas[id].Resources[0].Decodable()}})
	}
	var ms []*Manager
	for _, id := range ids {
		ms = append(ms, newManager(t, id, schemas[id], store, func() []Member { return members }))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for ctx := context.Background(); m.Ready(ctx) != nil; {
				m.Reconcile(ctx)
			}
		}()
	}
	close(start)
	wg.Wait()
	sv, err := ReadStorageVersion(context.Background(), store, "apps/widgets")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range sv.StorageVersions {
		got = append(got, e.NodeID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("entries = %v, want %v", got, ids)
	}
	if sv.CommonEncodingVersion != "" {
		t.Errorf("common = %q, want unset (n1 prefers v1, the rest v2)", sv.CommonEncodingVersion)
	}
	for _, m := range ms {
		if enc, err := m.WriteEncoding("apps/widgets"); enc != "v1" || err != nil {
			t.Errorf("%s writes %q, %v; want v1 (n1 decodes only v1)", m.cfg.NodeID, enc, err)
		}
	}
}

// TestRegisterConflictRetries makes the conflict deterministic: n2 registers between
// n1's read and n1's compare-and-swap. n1's CAS fails, it re-reads and keeps n2's entry.
func TestRegisterConflictRetries(t *testing.T) {
	store := openStore(t)
	s := mustSchema(t, "widgets-v1v2.yaml")
	n2 := newManager(t, "n2", s, store, alive("n1", "n2"))
	hs := &hookStore{Store: store, before: func() { n2.Reconcile(context.Background()) }}
	n1 := newManager(t, "n1", s, hs, alive("n1", "n2"))
	n1.Reconcile(context.Background())
	if err := n1.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n1.Conflicts(); got != 1 {
		t.Errorf("n1 conflicts = %d, want 1", got)
	}
	sv, _ := ReadStorageVersion(context.Background(), store, "apps/widgets")
	if len(sv.StorageVersions) != 2 || sv.CommonEncodingVersion != "v2" {
		t.Errorf("entries %+v common %q; want n1 and n2, common v2", sv.StorageVersions, sv.CommonEncodingVersion)
	}
}

// TestWritesWaitForRegistration: before its first registration a node refuses writes
// with the KEP's message and is not ready.
func TestWritesWaitForRegistration(t *testing.T) {
	store := openStore(t)
	m := newManager(t, "n1", mustSchema(t, "widgets-v1v2.yaml"), store, nil)
	_, err := m.WriteEncoding("apps/widgets")
	if !errors.Is(err, ErrNotRegistered) || err.Error() != "versions: wait for storage version registration to complete for resource: apps/widgets" {
		t.Errorf("before registration: %v", err)
	}
	if m.Ready(context.Background()) == nil {
		t.Error("ready before registration")
	}
	m.Reconcile(context.Background())
	if enc, err := m.WriteEncoding("apps/widgets"); enc != "v2" || err != nil {
		t.Errorf("after registration: %q, %v", enc, err)
	}
}

// TestGCRemovesDepartedKeepsReborn: the leader removes the entry of a node dead for
// GCAfter, but not one that the node, restarted, registered again meanwhile.
func TestGCRemovesDepartedKeepsReborn(t *testing.T) {
	store := openStore(t)
	s := mustSchema(t, "widgets-v1v2.yaml")
	var n2Dead atomic.Bool
	members := func() []Member {
		out := []Member{{ID: "n1", Alive: true}, {ID: "n2", Alive: true}, {ID: "n3", Alive: true}}
		if n2Dead.Load() {
			out[1] = Member{ID: "n2", Since: time.Now().Add(-time.Hour)}
		}
		return out
	}
	for _, id := range []string{"n2", "n3"} {
		newManager(t, id, s, store, members).Reconcile(context.Background())
	}
	// n2 dies, then restarts (new incarnation) between the GC's read and its CAS.
	n2Dead.Store(true)
	reborn := newManager(t, "n2", s, store, alive("n1", "n2", "n3"))
	reborn.cfg.Incarnation = 99
	hs := &hookStore{Store: store, before: func() { reborn.Reconcile(context.Background()) },
		match: func(cmd *fsm.Command) bool {
			return cmd.Txn != nil && cmd.Txn.Success[0].Type == fsm.OpPut && string(cmd.Txn.Success[0].Key) == StorageVersionKey("apps/widgets") && !hasEntry(cmd, "n2")
		}}
	n1 := newManager(t, "n1", s, hs, members)
	ctx := context.Background()
	n1.Reconcile(ctx) // registers n1 (keeps n2: it is in membership), then GC races the rebirth
	sv, _ := ReadStorageVersion(ctx, store, "apps/widgets")
	e, ok := sv.Entry("n2")
	if !ok || e.Incarnation != 99 {
		t.Fatalf("reborn n2's entry = %+v, %v; want incarnation 99 kept", e, ok)
	}
	// Now n2 stays dead: the next round removes it and recomputes agreement.
	if err := n1.collect(ctx, members()); err != nil {
		t.Fatal(err)
	}
	sv, _ = ReadStorageVersion(ctx, store, "apps/widgets")
	if _, ok := sv.Entry("n2"); ok || len(sv.StorageVersions) != 2 {
		t.Fatalf("after gc: %+v", sv.StorageVersions)
	}
	if c, _ := sv.Condition(ConditionAllEncodingVersionsEqual); c.Status != "True" || sv.CommonEncodingVersion != "v2" {
		t.Errorf("after gc: condition %+v common %q", c, sv.CommonEncodingVersion)
	}
}

func hasEntry(cmd *fsm.Command, id string) bool {
	sv, err := decodeStorageVersion(cmd.Txn.Success[0].Value, 0)
	if err != nil {
		return false
	}
	_, ok := sv.Entry(id)
	return ok
}

// TestEffectiveEncoding: the preferred version once everyone decodes it, else the
// newest version all decode, else none.
func TestEffectiveEncoding(t *testing.T) {
	var r *Resource
	for _, x := range mustSchema(t, "widgets-v1v2v3.yaml").Resources {
		if x.Name == "widgets" {
			r = x
		}
	}
	for i, tc := range []struct {
		others [][]string
		want   string
	}{
		{nil, r.Preferred},
		{[][]string{r.Decodable()}, r.Preferred},
		{[][]string{{"v1"}}, "v1"},
		{[][]string{r.Decodable(), {"v1", "v2"}}, "v2"},
		{[][]string{{"v9"}}, ""},
	} {
		got, err := EffectiveEncoding(r, tc.others)
		if got != tc.want || (tc.want == "") != errors.Is(err, ErrNoCommonEncoding) {
			t.Errorf("#%d: %q, %v; want %q", i, got, err, tc.want)
		}
	}
}

// TestRecomputeTransitions: the condition's transition time moves when the status
// changes and when the common version changes value, not otherwise.
func TestRecomputeTransitions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := func(id, enc string) ServerStorageVersion {
		return ServerStorageVersion{NodeID: id, EncodingVersion: enc, DecodableVersions: []string{"v1", "v2"}}
	}
	sv := &StorageVersion{}
	steps := []struct {
		entries    []ServerStorageVersion
		common     string
		status     string
		transition time.Time
	}{
		{[]ServerStorageVersion{e("a", "v1"), e("b", "v1")}, "v1", "True", t0},
		{[]ServerStorageVersion{e("a", "v1"), e("b", "v1")}, "v1", "True", t0},
		{[]ServerStorageVersion{e("a", "v2"), e("b", "v1")}, "", "False", t0.Add(2 * time.Minute)},
		{[]ServerStorageVersion{e("a", "v2"), e("b", "v2")}, "v2", "True", t0.Add(3 * time.Minute)},
	}
	for i, st := range steps {
		sv.StorageVersions = st.entries
		sv.Recompute(t0.Add(time.Duration(i) * time.Minute))
		c, _ := sv.Condition(ConditionAllEncodingVersionsEqual)
		if sv.CommonEncodingVersion != st.common || c.Status != st.status || !c.LastTransitionTime.Equal(st.transition) {
			t.Errorf("#%d: common %q status %s at %v; want %q %s at %v", i, sv.CommonEncodingVersion, c.Status,
				c.LastTransitionTime, st.common, st.status, st.transition)
		}
	}
	if err := (ServerStorageVersion{NodeID: "x", EncodingVersion: "v3", DecodableVersions: []string{"v1"}}).Validate(); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("encoding not decodable: %v", err)
	}
	if err := (ServerStorageVersion{NodeID: "x", EncodingVersion: "v1", DecodableVersions: []string{"v1"}, ServedVersions: []string{"v2"}}).Validate(); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("served not decodable: %v", err)
	}
}

// TestStorageStateCounts: tagged objects are counted from the state machine, untagged
// ones by their apiVersion, unreadable ones as Unknown; a version leaves the set when
// its last object is rewritten.
func TestStorageStateCounts(t *testing.T) {
	r := mustSchema(t, "widgets-v1v2.yaml").Resources[0]
	s := fsm.NewStore()
	put := func(name, value, enc string) {
		res := s.ApplyCommand(s.AppliedIndex()+1, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte(r.Prefix + name), Value: []byte(value), Encoding: enc}}}})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	put("a", `{"apiVersion":"apps/v1"}`, EncodingTag(r.Key(), "v1"))
	put("b", `{"apiVersion":"apps/v2"}`, EncodingTag(r.Key(), "v2"))
	put("c", `{"apiVersion":"apps/v1"}`, "")
	put("d", `not json`, "")
	ss, err := ComputeStorageState(s.View(), r, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"v1", "v2", VersionUnknown}; !slices.Equal(ss.PersistedEncodingVersions, want) ||
		ss.ObjectCounts["v1"] != 2 || ss.ObjectCounts["v2"] != 1 || ss.ObjectCounts[VersionUnknown] != 1 {
		t.Fatalf("state %+v, want %v with counts v1:2 v2:1 Unknown:1", ss, want)
	}
	for _, n := range []string{"a", "c", "d"} {
		put(n, `{"apiVersion":"apps/v2"}`, EncodingTag(r.Key(), "v2"))
	}
	ss, _ = ComputeStorageState(s.View(), r, "v2")
	if !slices.Equal(ss.PersistedEncodingVersions, []string{"v2"}) || ss.ObjectCounts["v2"] != 4 {
		t.Fatalf("after rewrite: %+v", ss)
	}
	if fmt.Sprint(ss.CurrentEncodingVersion) != "v2" {
		t.Errorf("current = %q", ss.CurrentEncodingVersion)
	}
}

// TestUndecodableUntagged: objects stored without a tag in a version this node lacks
// (data older than the resource) also keep it unready once a StorageState scan saw them.
func TestUndecodableUntagged(t *testing.T) {
	store := openStore(t)
	old := newManager(t, "n1", mustSchema(t, "widgets-v1v2.yaml"), store, alive("n1", "n2"))
	r := old.Schema().Resources[0]
	res, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte(r.Prefix + "legacy"), Value: []byte(`{"apiVersion":"apps/v1"}`)}}}})
	if err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	old.Reconcile(context.Background())
	if err := old.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	v2only := newManager(t, "n2", mustSchema(t, "widgets-v2only.yaml"), store, alive("n1", "n2"))
	v2only.Reconcile(context.Background())
	if err := v2only.Ready(context.Background()); !errors.Is(err, ErrUndecodable) {
		t.Fatalf("v2-only node with an untagged v1 object: ready = %v, want ErrUndecodable", err)
	}
}
