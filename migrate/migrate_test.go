package migrate

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/raft/rafttest"
	"github.com/keel-kv/keel/versions"
)

// The migrator runs against a real one-node Raft cluster on loopback (data in a temp
// dir) whose StorageVersion record a real versions.Manager keeps: v2 is the common
// encoding version. The objects are put in place with raw writes, as an older release
// (tagged v1) or a restored backup (untagged, apiVersion apps/v1) would have left them.

func openStore(t testing.TB) *raft.Node { return rafttest.Single(t, "n1") }

type fixture struct {
	t      testing.TB
	n      *raft.Node
	schema *versions.Schema
	res    *versions.Resource
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	n := openStore(t)
	s, err := versions.LoadSchema("../versions/testdata/widgets-v1v2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := versions.DefaultConfig()
	cfg.NodeID, cfg.Incarnation, cfg.Schema, cfg.Store = "n1", 1, s, n
	cfg.Members = func() []versions.Member { return []versions.Member{{ID: "n1", Incarnation: 1, Alive: true}} }
	cfg.Interval = 50 * time.Millisecond
	m, err := versions.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Open(context.Background())
	t.Cleanup(m.Close)
	f := &fixture{t: t, n: n, schema: s, res: s.Resources[0]}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sv, err := versions.ReadStorageVersion(context.Background(), n, "apps/widgets")
		if err == nil && sv != nil && sv.CommonEncodingVersion == "v2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no common version v2: %+v %v", sv, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return f
}

// put writes a raw value under the resource prefix with an encoding tag ("" = none).
func (f *fixture) put(name, value, tag string) int64 {
	f.t.Helper()
	res, err := f.n.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{
		Type: fsm.OpPut, Key: []byte(f.res.Prefix + name), Value: []byte(value), Encoding: tag}}}})
	if err != nil || res.Err != nil {
		f.t.Fatalf("put %s: %v %v", name, err, res.Err)
	}
	return res.Revision
}

func (f *fixture) get(name string) fsm.KeyValue {
	f.t.Helper()
	kv, err := f.n.Store().View().Get([]byte(f.res.Prefix+name), 0)
	if err != nil {
		f.t.Fatalf("get %s: %v", name, err)
	}
	return kv
}

func (f *fixture) migrator(cfg Config) *Migrator {
	f.t.Helper()
	cfg.Schema, cfg.Store, cfg.Rate = f.schema, f.n, -1
	m, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// maxTestPasses bounds the passes of a migration in these tests: one pass rewrites
// everything a correct migrator sees, and the tests add at most a few (a restart after a
// StorageVersion change, objects written behind the scan).
const maxTestPasses = 10

// stepUntil steps until the status is in state want. A migrator that makes no progress
// — a pass that leaves objects for the next one, which leaves them again — fails after
// maxTestPasses passes with what is left, rather than at the test binary's timeout;
// the steps are bounded too (200 per 100 objects scanned, so a benchmark of 100k
// objects fits).
func (f *fixture) stepUntil(m *Migrator, want State) *Status {
	f.t.Helper()
	for range 200_000 {
		if _, err := m.Step(context.Background(), f.res); err != nil {
			f.t.Fatalf("step: %v", err)
		}
		view := f.n.Store().View()
		st, err := ReadStatus(view, f.res.Key())
		if err != nil {
			f.t.Fatal(err)
		}
		if st != nil && st.State == want {
			return st
		}
		if st != nil && st.Pass > maxTestPasses {
			f.t.Fatalf("no progress: pass %d of the migration into %s (state %s), %v objects still left, want state %s; a pass leaves objects behind",
				st.Pass, st.Target, st.State, st.Remaining, want)
		}
	}
	f.t.Fatalf("never reached %s in 200000 steps", want)
	return nil
}

func v1obj(name string, size int) string {
	return fmt.Sprintf(`{"apiVersion":"apps/v1","metadata":{"name":%q},"spec":{"size":%d}}`, name, size)
}

// TestMigrate: tagged and untagged v1 objects are rewritten into v2 with their content
// converted; an object a client rewrote after the scan's revision is skipped, not
// reverted; a scan revision compacted mid-pass continues at the latest one (skipping
// what clients rewrote meanwhile, already in v2); an object
// that cannot be converted blocks the migration by name, once, and deleting it lets
// the migration finish.
func TestMigrate(t *testing.T) {
	f := newFixture(t)
	for i := range 20 {
		f.put(fmt.Sprintf("t%02d", i), v1obj(fmt.Sprintf("t%02d", i), i), "apps/widgets/v1")
	}
	f.put("u1", v1obj("u1", 7), "") // a restored backup: no tag, apiVersion apps/v1
	f.put("zz-poison", `{"apiVersion":"apps/v1","spec":"not an object"}`, "apps/widgets/v1")
	// Blocked, the migrator waits BlockedRetry before it scans again: an hour, so no
	// step of this test rescans until the test says that time has passed (below).
	m := f.migrator(Config{Chunk: 5, BlockedRetry: time.Hour})

	// First chunk: the pass is pinned to a revision.
	if more, err := m.Step(context.Background(), f.res); err != nil || !more {
		t.Fatalf("first step = %v, %v", more, err)
	}
	st, _ := ReadStatus(f.n.Store().View(), f.res.Key())
	if st.State != StateRunning || st.Target != "v2" || st.ScanRevision == 0 || st.Remaining["v1"] != 22-5 {
		t.Fatalf("after one chunk: %+v", st)
	}
	// A client rewrites t08 in v2 after the scan's revision: the next chunk reads the
	// old t08 at that revision, and its compare-and-swap fails.
	clientWrite := func(name string) string {
		return fmt.Sprintf(`{"apiVersion":"apps/v2","metadata":{"name":%q},"spec":{"replicas":99,"color":"red"}}`, name)
	}
	f.put("t08", clientWrite("t08"), "apps/widgets/v2")
	if _, err := m.Step(context.Background(), f.res); err != nil {
		t.Fatal(err)
	}
	if st, _ = ReadStatus(f.n.Store().View(), f.res.Key()); st.Skipped != 1 || st.Migrated != 9 {
		t.Fatalf("after the second chunk: %+v; want t08 skipped, 9 rewritten", st)
	}
	// Then a client rewrites t15 and history is compacted past the scan's revision.
	rev := f.put("t15", clientWrite("t15"), "apps/widgets/v2")
	if res, err := f.n.Apply(context.Background(), &fsm.Command{Type: fsm.CmdCompact, Revision: rev}); err != nil || res.Err != nil {
		t.Fatalf("compact: %v %v", err, res.Err)
	}

	st = f.stepUntil(m, StateBlocked)
	if len(st.Poison) != 1 || st.Poison[0].Key != f.res.Prefix+"zz-poison" || st.Remaining["v1"] != 1 {
		t.Fatalf("blocked status %+v: want exactly zz-poison listed, 1 left", st)
	}
	for i := range 20 {
		name := fmt.Sprintf("t%02d", i)
		kv := f.get(name)
		want := fmt.Sprintf(`"replicas":%d`, i)
		if i == 8 || i == 15 {
			if string(kv.Value) != clientWrite(name) {
				t.Errorf("%s = %s, want the client's write kept", name, kv.Value)
			}
			continue
		}
		if kv.Encoding != "apps/widgets/v2" || !bytes.Contains(kv.Value, []byte(want)) || !bytes.Contains(kv.Value, []byte(`"apiVersion":"apps/v2"`)) {
			t.Errorf("%s = %s (%s), want v2 with %s", name, kv.Value, kv.Encoding, want)
		}
	}
	if kv := f.get("u1"); kv.Encoding != "apps/widgets/v2" || !bytes.Contains(kv.Value, []byte(`"replicas":7`)) {
		t.Errorf("untagged u1 = %s (%s), want migrated", kv.Value, kv.Encoding)
	}

	// Blocked, it does not loop on the poison object; once it is deleted, it finishes.
	steps := 0
	for i := range 3 {
		more, err := m.Step(context.Background(), f.res)
		if err != nil {
			t.Fatalf("blocked step %d: %v", i, err)
		}
		if more {
			steps++
		}
	}
	if steps != 0 {
		t.Fatalf("blocked: %d of 3 steps asked to be stepped again, want 0", steps)
	}
	again, err := ReadStatus(f.n.Store().View(), f.res.Key())
	if err != nil || again == nil {
		t.Fatalf("status after blocked steps: %+v, %v", again, err)
	}
	if again.State != StateBlocked || len(again.Poison) != 1 {
		t.Fatalf("after blocked steps: state %s, poison listed %d times; want Blocked, once", again.State, len(again.Poison))
	}
	if _, err := f.n.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{
		Type: fsm.OpDelete, Key: []byte(f.res.Prefix + "zz-poison")}}}}); err != nil {
		t.Fatal(err)
	}
	m.cfg.BlockedRetry = time.Nanosecond // the retry interval has passed
	st = f.stepUntil(m, StateSucceeded)
	if len(st.Remaining) != 0 || st.Total != 21 || st.Finished.IsZero() {
		t.Fatalf("final status %+v", st)
	}
	if enc := f.n.Store().View().Encodings(); enc["apps/widgets/v1"] != 0 || enc["apps/widgets/v2"] != 21 {
		t.Fatalf("encodings %v, want 21 in v2", enc)
	}
	// Nothing left: a further step writes nothing.
	before := f.n.Store().Revision()
	if more, err := m.Step(context.Background(), f.res); more || err != nil || f.n.Store().Revision() != before {
		t.Fatalf("idle step = %v, %v; revision %d → %d", more, err, before, f.n.Store().Revision())
	}
}

// TestMigrateDryRun counts what it would rewrite and changes no object.
func TestMigrateDryRun(t *testing.T) {
	f := newFixture(t)
	for i := range 12 {
		f.put(fmt.Sprintf("d%02d", i), v1obj(fmt.Sprintf("d%02d", i), i), "apps/widgets/v1")
	}
	f.put("new", `{"apiVersion":"apps/v2","metadata":{"name":"new"},"spec":{"replicas":1}}`, "apps/widgets/v2")
	m := f.migrator(Config{Chunk: 5, DryRun: true})
	st := f.stepUntil(m, StateDryRun)
	if st.Migrated != 12 || st.Remaining["v1"] != 12 {
		t.Fatalf("dry run status %+v: want 12 counted, 12 left", st)
	}
	if enc := f.n.Store().View().Encodings(); enc["apps/widgets/v1"] != 12 {
		t.Fatalf("dry run changed objects: %v", enc)
	}
}
