package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// newKeyMigServer serves testdata/widgets-keymig.yaml: widgets moving from
// /registry/apps/widgets/ to /registry/apps/v2/widgets/, spec.size stored as spec.count
// under the new key.
func newKeyMigServer(t *testing.T) *testServer {
	t.Helper()
	ts := newTestServer(t)
	s, err := versions.LoadSchema("testdata/widgets-keymig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := versions.DefaultConfig()
	cfg.NodeID, cfg.Schema, cfg.Store = "n1", s, leaderStore{ts.store}
	m, err := versions.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.core.SetResources(m)
	m.Reconcile(context.Background())
	return ts
}

const (
	oldW = "/registry/apps/widgets/"
	newW = "/registry/apps/v2/widgets/"
)

// setPhase stores the phase record directly (what migrate.Advance/Rollback write).
func (ts *testServer) setPhase(t *testing.T, phase int, rollbackTo *int) {
	t.Helper()
	v, _ := json.Marshal(api.KeyPhaseRecord{Name: "widgets-v2-keys", Phase: phase, RollbackTo: rollbackTo})
	if _, err := ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
		Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte(versions.KeyPhaseKey("widgets-v2-keys")), Value: v}}}}); err != nil {
		t.Fatal(err)
	}
}

// raw reads a key from the store: value, mod revision, found.
func (ts *testServer) raw(t *testing.T, key string) (string, int64, bool) {
	t.Helper()
	view, err := ts.store.View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := view.Get([]byte(key), 0)
	if errors.Is(err, fsm.ErrKeyNotFound) {
		return "", 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(kv.Value), kv.ModRevision, true
}

func (ts *testServer) putSize(t *testing.T, name string, size, rev int64, want int) map[string]any {
	t.Helper()
	meta := map[string]any{}
	if rev > 0 {
		meta["revision"] = rev
	}
	var out map[string]any
	ts.doJSON(http.MethodPut, "/apis/apps/v1/widgets/"+name, objJSON(map[string]any{"metadata": meta,
		"spec": map[string]any{"size": size}}), want, &out)
	return out
}

func revOf(obj map[string]any) int64 {
	return int64(obj["metadata"].(map[string]any)["revision"].(float64))
}

func sizeIn(obj map[string]any) float64 {
	return obj["spec"].(map[string]any)["size"].(float64)
}

// TestKeyMigrationTypedWrites walks the phases on one store and checks, per phase,
// which keys a typed write and delete touch (both in one transaction: the same mod
// revision), where reads come from, and that compare-and-swap compares on the key the
// phase reads from.
func TestKeyMigrationTypedWrites(t *testing.T) {
	ts := newKeyMigServer(t)
	// Phase 0 (no record): old key only.
	ts.putSize(t, "a", 1, 0, http.StatusCreated)
	if _, _, ok := ts.raw(t, newW+"a"); ok {
		t.Fatal("phase 0 wrote the new key")
	}
	// Raw writes into the new range are refused like writes under the resource prefix.
	ts.expectError(http.MethodPut, api.PathKV+"%2Fregistry%2Fapps%2Fv2%2Fwidgets%2Fx", []byte("v"), http.StatusForbidden, api.ReasonReservedPrefix)

	// Phase 1: both keys, one transaction, the new one with the ops applied; reads old.
	ts.setPhase(t, 1, nil)
	out := ts.putSize(t, "b", 2, 0, http.StatusCreated)
	ov, orev, _ := ts.raw(t, oldW+"b")
	nv, nrev, ok := ts.raw(t, newW+"b")
	if !ok || orev != nrev || revOf(out) != orev {
		t.Fatalf("phase 1 put: old rev %d, new rev %d (found %v), response rev %d: want one transaction", orev, nrev, ok, revOf(out))
	}
	if !strings.Contains(ov, `"size":2`) || !strings.Contains(nv, `"count":2`) || strings.Contains(nv, "size") {
		t.Fatalf("phase 1 values: old %s new %s", ov, nv)
	}
	// An object from phase 0 exists only under the old key; it is still read.
	var got map[string]any
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets/a", nil, http.StatusOK, &got)
	if sizeIn(got) != 1 {
		t.Fatalf("phase 1 read of a = %v", got)
	}

	// Phase 2: reads from new with fallback; presents the new key in the old form.
	ts.setPhase(t, 2, nil)
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets/b", nil, http.StatusOK, &got)
	if sizeIn(got) != 2 || revOf(got) != nrev {
		t.Fatalf("phase 2 read of b = %v", got)
	}
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets/a", nil, http.StatusOK, &got)
	aRev := revOf(got)
	if sizeIn(got) != 1 {
		t.Fatalf("phase 2 fallback read of a = %v", got)
	}
	// Lists merge by name: both objects, each as the phase reads it.
	var list struct {
		Items []map[string]any `json:"items"`
	}
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets", nil, http.StatusOK, &list)
	if len(list.Items) != 2 || sizeIn(list.Items[1]) != 2 {
		t.Fatalf("phase 2 list = %v", list.Items)
	}

	// Phase 3: a copy (simulated as the leader writes it) gives a a new key at a later
	// revision; a client's CAS with the revision it read (the old key's) still holds.
	ts.setPhase(t, 3, nil)
	av, _, _ := ts.raw(t, oldW+"a")
	if _, err := ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte(newW + "a"), Value: []byte(strings.Replace(av, `"size"`, `"count"`, 1))}}}}); err != nil {
		t.Fatal(err)
	}
	out = ts.putSize(t, "a", 5, aRev, http.StatusOK)
	if sizeIn(out) != 5 {
		t.Fatalf("CAS over a copied object = %v", out)
	}
	// A stale revision is 409, nothing written.
	ts.putSize(t, "a", 6, aRev, http.StatusConflict)
	if v, _, _ := ts.raw(t, newW+"a"); !strings.Contains(v, `"count":5`) {
		t.Fatalf("after a refused CAS, new key a = %s", v)
	}
	// Delete removes both keys in one transaction.
	ts.doJSON(http.MethodDelete, "/apis/apps/v1/widgets/b", nil, http.StatusOK, nil)
	if _, _, ok := ts.raw(t, oldW+"b"); ok {
		t.Error("phase 3 delete left the old key")
	}
	if _, _, ok := ts.raw(t, newW+"b"); ok {
		t.Error("phase 3 delete left the new key")
	}

	// Phase 4: new key only; the old key of a stays as it was.
	ts.setPhase(t, 4, nil)
	beforeOld, beforeRev, _ := ts.raw(t, oldW+"a")
	ts.putSize(t, "a", 7, 0, http.StatusOK)
	if v, r, _ := ts.raw(t, oldW+"a"); v != beforeOld || r != beforeRev {
		t.Error("phase 4 wrote the old key")
	}
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets/a", nil, http.StatusOK, &got)
	if sizeIn(got) != 7 {
		t.Fatalf("phase 4 read = %v", got)
	}
	// An object only under the old key is not read in phase 4 (no fallback).
	ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte(oldW + "ghost"), Value: []byte(`{"apiVersion":"apps/v1","metadata":{"name":"ghost"}}`)}}}})
	ts.expectError(http.MethodGet, "/apis/apps/v1/widgets/ghost", nil, http.StatusNotFound, api.ReasonNotFound)
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets", nil, http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0]["metadata"].(map[string]any)["name"] != "a" || sizeIn(list.Items[0]) != 7 {
		t.Fatalf("phase 4 list = %v", list.Items)
	}
	// A rollback in progress writes both keys again.
	three := 3
	ts.setPhase(t, 4, &three)
	ts.putSize(t, "a", 8, 0, http.StatusOK)
	ov, orev, _ = ts.raw(t, oldW+"a")
	_, nrev, _ = ts.raw(t, newW+"a")
	if !strings.Contains(ov, `"size":8`) || orev != nrev {
		t.Fatalf("rolling back: old %s rev %d, new rev %d", ov, orev, nrev)
	}
}

// TestTypedWatchAcrossKeyMigration: a typed watch follows the range the phase lists.
// Started in phase 3 it shows the objects and their changes from the old range; when
// the phase switches to 4 it ends with a 410 ERROR before anything of the switch, and
// never shows the migration's own writes; a watch resumed from before the switch is
// 410 too. Started in phase 4 it reads the new range and shows each object in the old
// key's form (spec.count stored, spec.size shown); a rollback to 3 ends it the same way.
func TestTypedWatchAcrossKeyMigration(t *testing.T) {
	ts := newKeyMigServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts.setPhase(t, 3, nil)
	ts.putSize(t, "a", 1, 0, http.StatusCreated)
	_, next := ts.typedWatch(ctx, "/apis/apps/v1/widgets?watch=true")
	if o := readTyped(next()); o.typ != typedAdded || o.name != "a" || o.size != 1 {
		t.Fatalf("phase 3 initial event %+v", o)
	}
	ts.putSize(t, "a", 2, 0, http.StatusOK)
	o := readTyped(next())
	if o.typ != typedModified || o.name != "a" || o.size != 2 {
		t.Fatalf("phase 3 change %+v", o)
	}
	lastSeen := o.rev
	// The switch to 4, then what only the migration does: deleting the old key.
	ts.setPhase(t, 4, nil)
	_, switched, _ := ts.raw(t, versions.KeyPhaseKey("widgets-v2-keys"))
	if _, err := ts.store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
		Success: []fsm.Op{{Type: fsm.OpDelete, Key: []byte(oldW + "a")}}}}); err != nil {
		t.Fatal(err)
	}
	// Every event of the old range up to the switch was sent (none is at it).
	if o := readTyped(next()); o.typ != typedError || o.reason != api.ReasonResourceExpired || o.rev != switched {
		t.Fatalf("after the switch to phase 4 the watch sent %+v, want a 410 ERROR at %d", o, switched)
	}
	ts.expectError(http.MethodGet, fmt.Sprintf("/apis/apps/v1/widgets?watch=true&resourceVersion=%d", lastSeen), nil,
		http.StatusGone, api.ReasonResourceExpired)

	// Phase 4: the new range, shown in v1 (size), from the list's revision.
	_, next = ts.typedWatch(ctx, "/apis/apps/v1/widgets?watch=true")
	if o := readTyped(next()); o.typ != typedAdded || o.name != "a" || o.size != 2 {
		t.Fatalf("phase 4 initial event %+v", o)
	}
	ts.putSize(t, "a", 3, 0, http.StatusOK)
	if o := readTyped(next()); o.typ != typedModified || o.name != "a" || o.size != 3 {
		t.Fatalf("phase 4 change %+v", o)
	}
	ts.doJSON(http.MethodDelete, "/apis/apps/v1/widgets/a", nil, http.StatusOK, nil)
	if o := readTyped(next()); o.typ != typedDeleted || o.name != "a" || o.size != 3 {
		t.Fatalf("phase 4 delete %+v", o)
	}
	// Phase 5 reads the same range: the watch goes on.
	ts.setPhase(t, 5, nil)
	ts.putSize(t, "b", 4, 0, http.StatusCreated)
	if o := readTyped(next()); o.typ != typedAdded || o.name != "b" || o.size != 4 {
		t.Fatalf("phase 5 add %+v", o)
	}
	// Back to 3 (lists read the old range again): the watch ends at the next event.
	ts.setPhase(t, 3, nil)
	ts.putSize(t, "b", 5, 0, http.StatusOK)
	if o := readTyped(next()); o.typ != typedError || o.reason != api.ReasonResourceExpired {
		t.Fatalf("after the rollback to phase 3 the watch sent %+v, want a 410 ERROR", o)
	}
}

// TestReadyNote: a check that passes with a note counts as passing and prints the note
// in /readyz?verbose.
func TestReadyNote(t *testing.T) {
	ts := newTestServer(t)
	ts.core.AddReadyCheck("key-migrations", func(context.Context) error { return kv.ReadyNote("m phase 3") })
	code, body, _ := ts.do(http.MethodGet, "/readyz?verbose", nil)
	if code != http.StatusOK || !strings.Contains(string(body), "[+]key-migrations ok: m phase 3\n") ||
		!strings.Contains(string(body), "readyz check passed") {
		t.Fatalf("readyz?verbose = %d\n%s", code, body)
	}
	if code, body, _ := ts.do(http.MethodGet, "/readyz", nil); code != http.StatusOK {
		t.Fatalf("readyz = %d %s", code, body)
	}
}
