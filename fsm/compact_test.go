package fsm

import (
	"fmt"
	"testing"
	"time"
)

// histString draws key's history as compact.go's comment does: newest first, mod:value,
// a tombstone as mod:∅; "—" when the key is not in the tree.
func histString(s *Store, key string) string {
	e, ok := s.cur.tree.Get(&entry{key: []byte(key)})
	if !ok {
		return "—"
	}
	out := ""
	for v := e.hist; v != nil; v = v.next {
		if out != "" {
			out += " → "
		}
		if v.tombstone() {
			out += fmt.Sprintf("%d:∅", v.mod)
		} else {
			out += fmt.Sprintf("%d:%s", v.mod, v.value)
		}
	}
	return out
}

// TestCompactionWorkedExample replays the history drawn in compact.go, step by step.
func TestCompactionWorkedExample(t *testing.T) {
	s := NewStore()
	other := func() { apply(t, s, txn(put("other", "x"))) } // advances the revision
	steps := []struct {
		do   func()
		hist string
	}{
		{other, "—"}, // rev 1
		{func() { apply(t, s, txn(put("foo", "a"))) }, "2:a"}, // rev 2
		{other, "2:a"}, // rev 3
		{other, "2:a"}, // rev 4
		{func() { apply(t, s, txn(put("foo", "b"))) }, "5:b → 2:a"},
		{other, "5:b → 2:a"},
		{func() { apply(t, s, txn(del("foo"))) }, "7:∅ → 5:b → 2:a"},
		{other, "7:∅ → 5:b → 2:a"},
		{func() { apply(t, s, txn(put("foo", "c"))) }, "9:c → 7:∅ → 5:b → 2:a"},
		{func() { compactAll(t, s, 6) }, "9:c → 7:∅ → 5:b"},
		{func() { compactAll(t, s, 8) }, "9:c"},
		{other, "9:c"}, // rev 10
		{func() { compactAll(t, s, 10) }, "9:c"},
		{func() { apply(t, s, txn(del("foo"))) }, "11:∅ → 9:c"},
		{other, "11:∅ → 9:c"}, // rev 12
		{func() { compactAll(t, s, 12) }, "—"},
	}
	for i, st := range steps {
		st.do()
		if got := histString(s, "foo"); got != st.hist {
			t.Errorf("#%d: hist = %s, want %s", i, got, st.hist)
		}
	}
	if kv, err := s.View().Get([]byte("foo"), 0); err == nil {
		t.Errorf("foo after the last compaction = %v, want not found", kv)
	}
}

func compactAll(t *testing.T, s *Store, rev int64) {
	t.Helper()
	if res := apply(t, s, &Command{Type: CmdCompact, Revision: rev}); res.Err != nil {
		t.Fatalf("compact %d: %v", rev, res.Err)
	}
	for _, more := s.CompactStep(1); more; _, more = s.CompactStep(1) {
	}
}

// TestCompactorReclaims: a running Compactor empties the queue up to the compact
// revision by itself, and Close stops it.
func TestCompactorReclaims(t *testing.T) {
	s := NewStore()
	c := StartCompactor(s)
	defer c.Close()
	for i := range 2000 {
		apply(t, s, txn(put(fmt.Sprintf("k%02d", i%20), fmt.Sprint(i))))
	}
	apply(t, s, txn(put("new", "1"))) // supersedes nothing: nothing waits at the compact revision
	apply(t, s, &Command{Type: CmdCompact, Revision: s.Revision()})
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		left := s.pending.len()
		s.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queued versions left after 10s", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Close()
	c.Close()
}
