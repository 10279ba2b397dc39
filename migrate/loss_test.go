package migrate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// TestMigrateNeverLoses: an object whose conversion to the target would lose a value
// (here spec.legacy, which v2 drops) is not rewritten but listed as poison with the
// field named, and the migration is Blocked; once a client rewrites it, it finishes.
func TestMigrateNeverLoses(t *testing.T) {
	f := newFixture(t)
	f.put("a", v1obj("a", 1), "apps/widgets/v1")
	lossy := `{"apiVersion":"apps/v1","metadata":{"name":"l"},"spec":{"size":2,"legacy":"keep me"}}`
	f.put("l", lossy, "apps/widgets/v1")
	m := f.migrator(Config{Chunk: 5, BlockedRetry: 10 * time.Millisecond})
	st := f.stepUntil(m, StateBlocked)
	if len(st.Poison) != 1 || st.Poison[0].Key != f.res.Prefix+"l" || !strings.Contains(st.Poison[0].Error, "spec.legacy") {
		t.Fatalf("blocked status %+v: want l listed for spec.legacy", st)
	}
	if kv := f.get("l"); string(kv.Value) != lossy || kv.Encoding != "apps/widgets/v1" {
		t.Fatalf("l = %s (%s), want it untouched", kv.Value, kv.Encoding)
	}
	if kv := f.get("a"); kv.Encoding != "apps/widgets/v2" {
		t.Fatalf("a = %s (%s), want it migrated", kv.Value, kv.Encoding)
	}
	if _, err := f.n.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{
		Type: fsm.OpPut, Key: []byte(f.res.Prefix + "l"), Value: []byte(v1obj("l", 2)), Encoding: "apps/widgets/v1"}}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	f.stepUntil(m, StateSucceeded)
}
