package migrate

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// A chunk whose converted values pass maxChunkBytes ends early, and the next chunk
// starts at the object the cut stopped at: every object is rewritten in the first
// pass, none left behind for a second one (a cut that skipped the boundary object
// would leave it to pass 2).
//
//	12 objects × ~450 KiB, one scan of up to 100: chunk 1 rewrites objects until
//	their sizes reach 4 MiB (10 of them), chunk 2 starts at the 11th.
func TestMigrateChunkByteCut(t *testing.T) {
	f := newFixture(t)
	blob := strings.Repeat("x", 450<<10)
	const n = 12
	for i := range n {
		name := fmt.Sprintf("big%02d", i)
		f.put(name, fmt.Sprintf(`{"apiVersion":"apps/v1","metadata":{"name":%q},"spec":{"size":%d,"blob":%q}}`, name, i, blob), "apps/widgets/v1")
	}
	m := f.migrator(Config{Chunk: 100})
	chunks := 0
	for {
		more, err := m.Step(context.Background(), f.res)
		if err != nil {
			t.Fatalf("step: %v", err)
		}
		st, err := ReadStatus(f.n.Store().View(), f.res.Key())
		if err != nil {
			t.Fatal(err)
		}
		if st != nil && st.Pass == 1 && st.State == StateRunning {
			chunks++
		}
		if st != nil && st.State == StateSucceeded {
			if st.Pass != 1 || st.Migrated != n || st.Skipped != 0 {
				t.Fatalf("done after pass %d, migrated %d, skipped %d; want one pass rewriting all %d", st.Pass, st.Migrated, st.Skipped, n)
			}
			break
		}
		if !more || chunks > 10 {
			t.Fatalf("no end after %d chunks: %+v", chunks, st)
		}
	}
	if chunks < 2 {
		t.Errorf("%d chunks: the %d MiB of objects were not cut at %d MiB", chunks, n*450>>10, maxChunkBytes>>20)
	}
	for i := range n {
		kv := f.get(fmt.Sprintf("big%02d", i))
		if kv.Encoding != "apps/widgets/v2" || !bytes.Contains(kv.Value, []byte(fmt.Sprintf(`"replicas":%d`, i))) {
			t.Errorf("big%02d: encoding %s, want v2 with replicas %d", i, kv.Encoding, i)
		}
	}
}

// changeStorageVersionFirst is the store the migrator writes through, which rewrites
// the resource's StorageVersion record just before the first chunk's transaction is
// applied: the record moves between the chunk's scan and its commit.
type changeStorageVersionFirst struct {
	Store
	key  []byte
	done bool
}

func (s *changeStorageVersionFirst) Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if !s.done && cmd.Type == fsm.CmdTxn && len(cmd.Txn.Success) > 1 {
		s.done = true
		view, err := s.Store.View(ctx, fsm.Linearizable)
		if err != nil {
			return nil, err
		}
		kv, err := view.Get(s.key, 0)
		if err != nil {
			return nil, err
		}
		res, err := s.Store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{
			Type: fsm.OpPut, Key: s.key, Value: kv.Value}}}})
		if err != nil || res.Err != nil {
			return nil, fmt.Errorf("rewrite the StorageVersion record: %v %v", err, res.Err)
		}
	}
	return s.Store.Apply(ctx, cmd)
}

// A chunk is committed only while the StorageVersion record is the one its pass began
// with: a record rewritten between the chunk's scan and its commit (a member that
// changed its encoding) fails the chunk, and nothing of it is written.
func TestMigrateChunkRefusedAcrossStorageVersionChange(t *testing.T) {
	f := newFixture(t)
	for i := range 5 {
		f.put(fmt.Sprintf("t%02d", i), v1obj(fmt.Sprintf("t%02d", i), i), "apps/widgets/v1")
	}
	store := &changeStorageVersionFirst{Store: f.n, key: []byte(versions.StorageVersionKey(f.res.Key()))}
	m, err := New(Config{Schema: f.schema, Store: store, Rate: -1, Chunk: 10})
	if err != nil {
		t.Fatal(err)
	}
	var stepErr error
	for range 3 {
		if _, stepErr = m.Step(context.Background(), f.res); stepErr != nil || store.done {
			break
		}
	}
	if !store.done {
		t.Fatalf("no chunk was committed (step error %v)", stepErr)
	}
	for i := range 5 {
		if kv := f.get(fmt.Sprintf("t%02d", i)); kv.Encoding != "apps/widgets/v1" {
			t.Fatalf("t%02d rewritten into %s by a chunk committed across a StorageVersion change", i, kv.Encoding)
		}
	}
	// The migration goes on in a new pass, against the record as it is now.
	st := f.stepUntil(m, StateSucceeded)
	if st.Migrated != 5 {
		t.Errorf("after the restart: %+v, want 5 migrated", st)
	}
}
