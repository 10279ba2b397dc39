package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

func (f *fixture) status() *Status {
	f.t.Helper()
	st, err := ReadStatus(f.n.Store().View(), f.res.Key())
	if err != nil || st == nil {
		f.t.Fatalf("status: %v %v", st, err)
	}
	return st
}

func (f *fixture) putV1(n int) {
	for i := range n {
		name := fmt.Sprintf("o%04d", i)
		f.put(name, v1obj(name, i), "apps/widgets/v1")
	}
}

// TestMigrateAbortResume: an abort between chunks stops the migration with its
// checkpoint; steps then write nothing; a request resumes it from that checkpoint, and
// the pass ends with exact counts — each object scanned once and rewritten once.
//
//	step 1  pass 1 starts, chunk 1 (10 objects)       Running
//	Abort                                               Aborted, nextKey kept
//	steps   nothing                                     Aborted
//	Request, steps                                      Running (resumed) → Succeeded
func TestMigrateAbortResume(t *testing.T) {
	f := newFixture(t)
	f.putV1(35)
	m := f.migrator(Config{Chunk: 10})
	ctx := context.Background()
	if _, err := m.Step(ctx, f.res); err != nil {
		t.Fatal(err)
	}
	if _, err := Abort(ctx, f.n, f.res.Key()); err != nil {
		t.Fatal(err)
	}
	st := f.status()
	if st.State != StateAborted || len(st.NextKey) == 0 || st.Scanned != 10 || st.Migrated != 10 {
		t.Fatalf("after abort: %+v", st)
	}
	if c, _ := st.Condition(api.ConditionRunning); c.Status != "False" || c.Reason != string(StateAborted) {
		t.Errorf("Running condition after abort = %+v", c)
	}
	before := f.n.Store().Revision()
	for range 3 {
		if more, err := m.Step(ctx, f.res); more || err != nil {
			t.Fatalf("step while aborted = %v, %v", more, err)
		}
	}
	if got := f.n.Store().Revision(); got != before {
		t.Fatalf("aborted migration wrote: revision %d → %d", before, got)
	}
	if _, err := Abort(ctx, f.n, f.res.Key()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second abort = %v, want ErrNotRunning", err)
	}
	if _, err := Request(ctx, f.n, f.res.Key()); err != nil {
		t.Fatal(err)
	}
	st = f.stepUntil(m, StateSucceeded)
	if st.Pass != 1 || st.Scanned != 35 || st.Migrated != 35 || st.Skipped != 0 || st.Requested {
		t.Fatalf("final %+v: want one pass, 35 scanned and rewritten", st)
	}
	if c, _ := st.Condition(api.ConditionSucceeded); c.Status != "True" || c.LastTransitionTime.IsZero() {
		t.Errorf("Succeeded condition = %+v", c)
	}
	if enc := f.n.Store().View().Encodings(); enc["apps/widgets/v2"] != 35 || enc["apps/widgets/v1"] != 0 {
		t.Fatalf("encodings %v", enc)
	}
}

// TestMigrateAbortFencesChunk: an abort written while a chunk is in flight (here:
// between the chunk's scan and its transaction, simulated by a status write the
// chunk did not read) makes the chunk's transaction fail; nothing of it is written.
func TestMigrateAbortFencesChunk(t *testing.T) {
	f := newFixture(t)
	f.putV1(20)
	m := f.migrator(Config{Chunk: 10})
	ctx := context.Background()
	if _, err := m.Step(ctx, f.res); err != nil {
		t.Fatal(err)
	}
	st := f.status()
	view := f.n.Store().View()
	if _, err := Abort(ctx, f.n, f.res.Key()); err != nil {
		t.Fatal(err)
	}
	next := *st
	err := m.chunk(ctx, view, f.res, &next) // read before the abort
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("chunk after abort = %v, want ErrConflict", err)
	}
	if enc := f.n.Store().View().Encodings(); enc["apps/widgets/v2"] != 10 {
		t.Fatalf("encodings %v: the fenced chunk wrote", enc)
	}
}

// TestMigrateStorageVersionChange: a StorageVersion record that changes during a pass
// (another node registers) makes the next rewrite fail its condition; the pass
// restarts at a new revision and the migration still ends with every object in v2.
func TestMigrateStorageVersionChange(t *testing.T) {
	f := newFixture(t)
	f.putV1(30)
	m := f.migrator(Config{Chunk: 10})
	ctx := context.Background()
	if _, err := m.Step(ctx, f.res); err != nil {
		t.Fatal(err)
	}
	sv, err := versions.ReadStorageVersion(ctx, f.n, f.res.Key())
	if err != nil {
		t.Fatal(err)
	}
	e, _ := sv.Entry("n1")
	e.NodeID = "n2"
	sv.Upsert(e)
	sv.Recompute(time.Now())
	rev := sv.Revision
	sv.Revision = 0
	b, _ := json.Marshal(sv)
	key := []byte(versions.StorageVersionKey(f.res.Key()))
	if res, err := f.n.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
		Compares: []fsm.Compare{{Key: key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: rev}},
		Success:  []fsm.Op{{Type: fsm.OpPut, Key: key, Value: b}}}}); err != nil || !res.Succeeded {
		t.Fatalf("add n2: %v %+v", err, res)
	}
	st := f.stepUntil(m, StateSucceeded)
	if st.Pass != 2 || st.Migrated != 30 || st.Target != "v2" {
		t.Fatalf("final %+v: want the pass restarted once, 30 rewritten", st)
	}
}

// TestMigrateSettings: with auto off nothing starts by itself; a request starts it; a
// rate of 0 is refused.
func TestMigrateSettings(t *testing.T) {
	f := newFixture(t)
	f.putV1(5)
	ctx := context.Background()
	if err := WriteSettings(ctx, f.n, Settings{Auto: true, Rate: 0}); !errors.Is(err, ErrBadSettings) {
		t.Errorf("rate 0 = %v, want ErrBadSettings", err)
	}
	if err := WriteSettings(ctx, f.n, Settings{Auto: false, Rate: -1}); err != nil {
		t.Fatal(err)
	}
	m := f.migrator(Config{})
	for range 3 {
		if _, err := m.Step(ctx, f.res); err != nil {
			t.Fatal(err)
		}
	}
	if st := f.status(); st.State != StateWaiting {
		t.Fatalf("auto off: %+v, want Waiting", st)
	}
	if _, err := Request(ctx, f.n, f.res.Key()); err != nil {
		t.Fatal(err)
	}
	if st := f.stepUntil(m, StateSucceeded); st.Migrated != 5 {
		t.Fatalf("requested migration %+v", st)
	}
}

// TestMigrateConcurrentWrites: clients update and delete objects of the resource (in
// v2) while the migration runs (from its second chunk on). Every object ends in v2 with the client's last
// content where a client wrote it, each scanned object is rewritten or skipped exactly
// once, and the exact counts agree.
func TestMigrateConcurrentWrites(t *testing.T) {
	f := newFixture(t)
	const n = 400
	f.putV1(n)
	m := f.migrator(Config{Chunk: 20})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first chunk pins the pass's revision; then every writer completes a round
	// over its objects (most of them ahead of the scan) before the migration goes on.
	if _, err := m.Step(ctx, f.res); err != nil {
		t.Fatal(err)
	}
	var wg, firstRound sync.WaitGroup
	firstRound.Add(3)
	last := make([]int, n) // replicas of the last client write, 0 = none
	deleted := make([]bool, n)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 1; ctx.Err() == nil; round++ {
				for i := w; i < n && ctx.Err() == nil; i += 7 {
					name := fmt.Sprintf("o%04d", i)
					key := []byte(f.res.Prefix + name)
					var op fsm.Op
					if i%21 == 0 {
						op = fsm.Op{Type: fsm.OpDelete, Key: key}
					} else {
						body := fmt.Sprintf(`{"apiVersion":"apps/v2","metadata":{"name":%q},"spec":{"replicas":%d}}`, name, 1000*round+i)
						op = fsm.Op{Type: fsm.OpPut, Key: key, Value: []byte(body), Encoding: "apps/widgets/v2"}
					}
					res, err := f.n.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{op}}})
					if err != nil || res.Err != nil {
						if round == 1 {
							firstRound.Done()
						}
						return
					}
					if op.Type == fsm.OpDelete {
						deleted[i] = true
					} else {
						last[i] = 1000*round + i
					}
				}
				if round == 1 {
					firstRound.Done()
				}
			}
		}()
	}
	firstRound.Wait()
	st := f.stepUntil(m, StateSucceeded)
	cancel()
	wg.Wait()
	if st.Pass != 1 || st.Scanned != n || st.Migrated+st.Skipped != n || st.Skipped == 0 {
		t.Errorf("status %+v: want one pass, %d scanned, each rewritten or skipped, some skipped", st, n)
	}
	view := f.n.Store().View()
	live := int64(0)
	for i := range n {
		kv, err := view.Get([]byte(f.res.Prefix+fmt.Sprintf("o%04d", i)), 0)
		if errors.Is(err, fsm.ErrKeyNotFound) && deleted[i] {
			continue
		}
		if err != nil {
			t.Fatalf("o%04d: %v", i, err)
		}
		live++
		want := fmt.Sprintf(`"replicas":%d`, i)
		if last[i] != 0 {
			want = fmt.Sprintf(`"replicas":%d`, last[i])
		}
		if kv.Encoding != "apps/widgets/v2" || !json.Valid(kv.Value) || !bytes.Contains(kv.Value, []byte(want)) {
			t.Errorf("o%04d = %s (%s), want v2 with %s", i, kv.Value, kv.Encoding, want)
		}
	}
	if enc := view.Encodings(); enc["apps/widgets/v1"] != 0 || enc["apps/widgets/v2"] != live {
		t.Errorf("encodings %v, want %d in v2", enc, live)
	}
}

// TestMigrateWaitingThenTargetBack: a finished migration that waited while its target
// was gone (a node of an older release, which cannot decode it, was in the cluster)
// says Succeeded again once the target is back and nothing is left to rewrite — the
// rolling upgrade test's downgrade and upgrade found it stuck in Waiting.
func TestMigrateWaitingThenTargetBack(t *testing.T) {
	f := newFixture(t)
	f.putV1(10)
	m := f.migrator(Config{})
	done := f.stepUntil(m, StateSucceeded)
	waiting := *done
	waiting.State, waiting.Message = StateWaiting, "no common encoding version: a node cannot decode v2"
	if err := m.save(context.Background(), &waiting, done); err != nil {
		t.Fatal(err)
	}
	if st := f.status(); st.State != StateWaiting {
		t.Fatalf("state %s after saving Waiting", st.State)
	}
	st := f.stepUntil(m, StateSucceeded)
	if st.Target != "v2" || st.RemainingTotal() != 0 {
		t.Fatalf("final %+v: want Succeeded into v2 with nothing left", st)
	}
}
