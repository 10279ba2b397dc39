package fsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wev is an event in a comparable form.
type wev struct {
	rev       int64
	typ       EventType
	key, val  string
	prev      string // "" when absent
	prevFound bool
}

func (e wev) String() string {
	return fmt.Sprintf("%d:%v %s=%q prev(%v)=%q", e.rev, e.typ, e.key, e.val, e.prevFound, e.prev)
}

func flatten(gs []*RevisionEvents) []wev {
	var out []wev
	for _, g := range gs {
		for _, ev := range g.Events {
			if ev.KV.ModRevision != g.Revision {
				panic(fmt.Sprintf("event of %q has mod revision %d in group %d", ev.KV.Key, ev.KV.ModRevision, g.Revision))
			}
			w := wev{rev: g.Revision, typ: ev.Type, key: string(ev.KV.Key), val: string(ev.KV.Value)}
			if ev.PrevKV != nil {
				w.prev, w.prevFound = string(ev.PrevKV.Value), true
			}
			out = append(out, w)
		}
	}
	return out
}

func prefixWatch(prefix string, start int64) WatchOptions {
	return WatchOptions{Key: []byte(prefix), End: PrefixEnd([]byte(prefix)), StartRevision: start}
}

// collect reads w until it has returned revision to (or ctx ends).
func collect(t *testing.T, w *Watcher, to int64) []wev {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []wev
	for {
		if rev, ok := w.Bookmark(); ok && rev >= to {
			return out
		}
		gs, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v (have %v)", err, out)
		}
		out = append(out, flatten(gs)...)
		if gs[len(gs)-1].Revision >= to {
			return out
		}
	}
}

// History (prefix "a/", one txn per line):
//
//	rev 1: put a/1=x
//	rev 2: put a/2=y, put b/1=z      (b/1 is outside the prefix)
//	rev 3: put a/1=x2, delete a/2    (one txn: two events, one revision)
//	rev 4: put b/2=w                  (nothing for the watcher)
//	rev 5: delete a/1
func TestWatchReplayLiveAndTxnGrouping(t *testing.T) {
	want := []wev{
		{1, EventPut, "a/1", "x", "", false},
		{2, EventPut, "a/2", "y", "", false},
		{3, EventPut, "a/1", "x2", "x", true},
		{3, EventDelete, "a/2", "", "y", true},
		{5, EventDelete, "a/1", "", "x2", true},
	}
	writes := []*Command{
		txn(put("a/1", "x")),
		txn(put("a/2", "y"), put("b/1", "z")),
		txn(put("a/1", "x2"), del("a/2")),
		txn(put("b/2", "w")),
		txn(del("a/1")),
	}
	// Start the watch after k writes: k=0 is all live, k=5 all replay.
	for k := 0; k <= len(writes); k++ {
		s := NewStore()
		for _, c := range writes[:k] {
			apply(t, s, c)
		}
		w, err := s.Watch(prefixWatch("a/", 1))
		if err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			// Register (replay) before the rest is written, for a real hand-off.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			first, err := w.Next(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			got := flatten(first)
			for _, c := range writes[k:] {
				apply(t, s, c)
			}
			got = append(got, collect(t, w, 5)...)
			checkEvents(t, fmt.Sprintf("k=%d", k), got, want)
			w.Close()
			continue
		}
		for _, c := range writes {
			apply(t, s, c)
		}
		checkEvents(t, "k=0", collect(t, w, 5), want)
		w.Close()
	}
}

func checkEvents(t *testing.T, name string, got, want []wev) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d:\n got %v\nwant %v", name, len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: #%d: %v, want %v", name, i, got[i], want[i])
		}
	}
}

func TestWatchSingleKeyAndFromNow(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("k", "1"), put("k2", "1")))
	w, err := s.Watch(WatchOptions{Key: []byte("k")}) // from now: revision 2
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	apply(t, s, txn(put("k2", "2")))
	apply(t, s, txn(put("k", "2")))
	checkEvents(t, "key", collect(t, w, 3), []wev{{3, EventPut, "k", "2", "1", true}})
}

// A watcher that never reads: the apply path goes on, the watch ends with
// ErrSlowWatcher after what it queued, and a resume from LastRevision+1 replays the
// rest from history.
func TestWatchSlowWatcher(t *testing.T) {
	s := NewStore()
	w, err := s.Watch(WatchOptions{Key: []byte("a"), End: []byte{}, StartRevision: 1, Buffer: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Next(ctx) // registers at revision 0
	for i := 1; i <= 100; i++ {
		apply(t, s, txn(put(fmt.Sprintf("a%d", i), "v")))
	}
	var got []wev
	var werr *WatchError
	for {
		gs, err := w.Next(context.Background())
		if errors.As(err, &werr) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, flatten(gs)...)
	}
	if !errors.Is(werr, ErrSlowWatcher) || werr.LastRevision != 3 || len(got) != 3 {
		t.Fatalf("end = %v after %d events, want SlowWatcher at last revision 3 after 3", werr, len(got))
	}
	w2, err := s.Watch(WatchOptions{Key: []byte("a"), End: []byte{}, StartRevision: werr.LastRevision + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	got = append(got, collect(t, w2, 100)...)
	for i, e := range got {
		if e.rev != int64(i+1) {
			t.Fatalf("#%d: rev = %d, want %d", i, e.rev, i+1)
		}
	}
}

func TestWatchCompacted(t *testing.T) {
	s := NewStore()
	for i := 0; i < 10; i++ {
		apply(t, s, txn(put("a", fmt.Sprint(i))))
	}
	apply(t, s, &Command{Type: CmdCompact, Revision: 5})
	for _, c := range []struct {
		start int64
		ok    bool
	}{{1, false}, {4, false}, {5, true}, {6, true}, {11, true}, {0, true}} {
		w, err := s.Watch(WatchOptions{Key: []byte("a"), StartRevision: c.start})
		var werr *WatchError
		switch {
		case c.ok && err != nil:
			t.Errorf("start %d: %v", c.start, err)
		case !c.ok && (!errors.As(err, &werr) || !errors.Is(err, ErrCompacted) || werr.CompactRevision != 5):
			t.Errorf("start %d: err = %v, want ErrCompacted at 5", c.start, err)
		}
		if w != nil {
			w.Close()
		}
	}
	// Reclaimed versions do not matter above the compact revision: prev_kv of 6 is 5.
	for s.CompactStep(100); ; {
		if _, more := s.CompactStep(100); !more {
			break
		}
	}
	w, _ := s.Watch(WatchOptions{Key: []byte("a"), StartRevision: 6})
	defer w.Close()
	got := collect(t, w, 10)
	if len(got) != 5 || got[0] != (wev{6, EventPut, "a", "5", "4", true}) {
		t.Fatalf("after compaction: %v", got)
	}
}

// A watch may start at the compact revision itself, as on etcd (clients resume at the
// compact_revision a refused watch reports). Its events at that revision are those
// compaction keeps, whether or not CompactStep has run yet on this replica: the puts
// and the deletes (a tombstone at the compact revision is kept, as etcd 3.7 keeps it),
// without prev_kv (the version before may be reclaimed; etcd reads prev_kv at
// revision-1, below its compact revision, and finds none). The next compaction
// reclaims that tombstone.
func TestWatchAtCompactRevision(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("a", "1"), put("b", "1"))) // 1
	apply(t, s, txn(put("a", "2"), del("b")))      // 2
	apply(t, s, txn(put("c", "3")))                // 3
	apply(t, s, &Command{Type: CmdCompact, Revision: 2})
	want := []wev{{2, EventPut, "a", "2", "", false}, {2, EventDelete, "b", "", "", false}, {3, EventPut, "c", "3", "", false}}
	for _, stage := range []string{"before CompactStep", "after CompactStep"} {
		w, err := s.Watch(WatchOptions{Key: []byte("a"), End: []byte{}, StartRevision: 2})
		if err != nil {
			t.Fatalf("%s: watch at the compact revision: %v", stage, err)
		}
		if got := collect(t, w, 3); !slices.Equal(got, want) {
			t.Errorf("%s: watch at the compact revision = %v, want %v", stage, got, want)
		}
		w.Close()
		for {
			if _, more := s.CompactStep(100); !more {
				break
			}
		}
	}
	apply(t, s, &Command{Type: CmdCompact, Revision: 3})
	for {
		if _, more := s.CompactStep(100); !more {
			break
		}
	}
	if n := s.View().st.tree.Len(); n != 2 {
		t.Errorf("after compacting past the delete, the tree holds %d keys, want 2 (b's tombstone reclaimed)", n)
	}
}

func TestWatchRestoreEndsWatchers(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("a", "1")))
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	w, _ := s.Watch(WatchOptions{Key: []byte("a"), StartRevision: 1})
	defer w.Close()
	collect(t, w, 1)
	apply(t, s, txn(put("a", "2")))
	if err := s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	var werr *WatchError
	for {
		_, err := w.Next(context.Background())
		if err != nil {
			if !errors.As(err, &werr) || !errors.Is(err, ErrWatchRestored) {
				t.Fatalf("err = %v, want ErrWatchRestored", err)
			}
			break
		}
	}
}

func TestWatchBadOptions(t *testing.T) {
	s := NewStore()
	for _, o := range []WatchOptions{
		{},
		{Key: []byte("b"), End: []byte("a")},
		{Key: []byte("a"), StartRevision: -1},
		{Key: []byte("a"), Buffer: -1},
	} {
		if _, err := s.Watch(o); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("%+v: err = %v, want ErrInvalidCommand", o, err)
		}
	}
}

// watchModel is the expected event stream: every revision's changes, computed by
// plain sequential semantics from the writes alone.
type watchModel struct {
	rev   int64
	state map[string]string
	evs   []wev
}

func (m *watchModel) apply(ops []Op, keys []string) {
	before := make(map[string]string, len(m.state))
	for k, v := range m.state {
		before[k] = v
	}
	wrote := false
	touched := map[string]bool{}
	for _, op := range ops {
		switch op.Type {
		case OpPut:
			m.state[string(op.Key)] = string(op.Value)
			touched[string(op.Key)], wrote = true, true
		case OpDelete:
			if _, ok := m.state[string(op.Key)]; ok {
				delete(m.state, string(op.Key))
				touched[string(op.Key)], wrote = true, true
			}
		case OpDeleteRange:
			for k := range m.state {
				if k >= string(op.Key) && k < string(op.End) {
					delete(m.state, k)
					touched[k], wrote = true, true
				}
			}
		}
	}
	if !wrote {
		return
	}
	m.rev++
	for _, k := range keys { // keys are sorted: events in key order
		if !touched[k] {
			continue
		}
		prev, had := before[k]
		if v, ok := m.state[k]; ok {
			m.evs = append(m.evs, wev{m.rev, EventPut, k, v, prev, had})
		} else if had {
			m.evs = append(m.evs, wev{m.rev, EventDelete, k, "", prev, had})
		}
	}
}

// Writes run concurrently with watch starts (random start revisions, ranges and
// buffers, slow readers that get cut and resume, compactions): every watcher's stream,
// resumes included, must equal the model's events of its range from its start.
func TestWatchRandomizedAgainstModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	keys := []string{"a/1", "a/2", "a/3", "b/1", "b/2", "c"}
	s := NewStore()
	m := &watchModel{state: map[string]string{}}
	const writes = 3000
	var compactedTo int64
	compactions := map[int64]bool{} // every compact revision; written by this goroutine, read after wg.Wait
	var final atomic.Int64          // the last revision, once every write is applied
	var mu sync.Mutex               // guards compactedTo
	var wg sync.WaitGroup
	type result struct {
		lo, hi  string
		start   int64
		got     []wev
		stopped bool // a compaction overtook a resume: the stream ends early, legally
	}
	results := make(chan result, 200)
	watch := func(lo, hi string, start int64, buffer int, slow bool) {
		defer wg.Done()
		r := result{lo: lo, hi: hi, start: start}
		defer func() { results <- r }()
		next := start
		for {
			w, err := s.Watch(WatchOptions{Key: []byte(lo), End: []byte(hi), StartRevision: next, Buffer: buffer})
			if errors.Is(err, ErrCompacted) {
				r.stopped = true
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			for {
				if slow {
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				gs, err := w.Next(ctx)
				cancel()
				if err == nil {
					r.got = append(r.got, flatten(gs)...)
					next = gs[len(gs)-1].Revision + 1
					continue
				}
				var werr *WatchError
				switch {
				case errors.As(err, &werr) && errors.Is(err, ErrCompacted):
					r.stopped = true
					w.Close()
					return
				case errors.As(err, &werr):
					if werr.LastRevision+1 < next {
						t.Errorf("watch ended at last revision %d, but %d was delivered", werr.LastRevision, next-1)
					}
					next = werr.LastRevision + 1
				case errors.Is(err, context.DeadlineExceeded):
					if rev, ok := w.Bookmark(); ok && final.Load() > 0 && rev >= final.Load() {
						w.Close()
						return
					}
					continue
				default:
					t.Error(err)
					w.Close()
					return
				}
				w.Close()
				break
			}
		}
	}
	for i := 0; i < writes; i++ {
		var ops []Op
		seen := map[string]bool{}
		for n := 1 + rng.IntN(3); n > 0; n-- {
			k := keys[rng.IntN(len(keys))]
			if seen[k] {
				continue
			}
			seen[k] = true
			switch rng.IntN(10) {
			case 0, 1, 2:
				ops = append(ops, del(k))
			case 3:
				if len(ops) == 0 {
					ops = append(ops, Op{Type: OpDeleteRange, Key: []byte("a/"), End: []byte("a0")})
				}
			default:
				ops = append(ops, put(k, fmt.Sprint(i)))
			}
		}
		before := m.rev
		m.apply(ops, keys)
		res := apply(t, s, &Command{Type: CmdTxn, Txn: &Txn{Success: ops}})
		if res.Revision != m.rev {
			t.Fatalf("write %d: revision %d, model %d (was %d)", i, res.Revision, m.rev, before)
		}
		if i%500 == 499 {
			mu.Lock()
			compactedTo = m.rev - 200
			mu.Unlock()
			compactions[m.rev-200] = true
			apply(t, s, &Command{Type: CmdCompact, Revision: m.rev - 200})
			s.CompactStep(1 << 20)
		}
		if rng.IntN(40) == 0 {
			mu.Lock()
			lowest := compactedTo + 1
			mu.Unlock()
			start := lowest + rng.Int64N(m.rev-lowest+2)
			ranges := [][2]string{{"a/", "a0"}, {"", "\xff"}, {"b/1", "b/2"}, {"a/2", "c"}}
			rg := ranges[rng.IntN(len(ranges))]
			wg.Add(1)
			go watch(rg[0], rg[1], start, 1+rng.IntN(8), rng.IntN(2) == 0)
		}
	}
	if m.rev < writes {
		// Pad to the revision the watchers wait for.
		for m.rev < writes {
			m.apply([]Op{put("pad", "x")}, append(keys, "pad"))
			apply(t, s, txn(put("pad", "x")))
		}
	}
	final.Store(m.rev)
	wg.Wait()
	close(results)
	n := 0
	for r := range results {
		n++
		var want []wev
		for _, e := range m.evs {
			if e.rev >= r.start && e.key >= r.lo && e.key < r.hi {
				want = append(want, e)
			}
		}
		if r.stopped {
			if len(r.got) > len(want) {
				t.Fatalf("watch [%q,%q) from %d: more events than the model", r.lo, r.hi, r.start)
			}
			want = want[:len(r.got)]
		}
		// A watch may start at the compact revision itself, as on etcd, or stand at it
		// when the compaction lands; that revision's events carry no previous value
		// (what preceded them is compacted away), and only that revision's.
		for i := range want {
			if i < len(r.got) && compactions[want[i].rev] && !r.got[i].prevFound {
				want[i].prev, want[i].prevFound = "", false
			}
		}
		checkEvents(t, fmt.Sprintf("watch [%q,%q) from %d", r.lo, r.hi, r.start), r.got, want)
	}
	t.Logf("%d watchers checked, %d revisions", n, m.rev)
}

// TestWatchNotifyPoll: a watcher served by polling Next with a done context (the
// stream protocol's pump) is told by Notify when events are queued and when it ends,
// and a poll with nothing ready returns the context's error without blocking.
func TestWatchNotifyPoll(t *testing.T) {
	s := NewStore()
	notified := make(chan struct{}, 16)
	opts := prefixWatch("p/", 0)
	opts.Notify = func() { notified <- struct{}{} }
	w, err := s.Watch(opts)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if gs, err := w.Next(done); !errors.Is(err, context.Canceled) || len(gs) != 0 {
		t.Fatalf("poll of an idle watcher = %v, %v", gs, err)
	}
	apply(t, s, txn(put("p/a", "1")))
	select {
	case <-notified:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification for a queued event")
	}
	gs, err := w.Next(done)
	if err != nil || len(gs) != 1 || string(gs[0].Events[0].KV.Key) != "p/a" {
		t.Fatalf("poll after the notification = %v, %v", gs, err)
	}
	w.Close()
	select {
	case <-notified:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification on Close")
	}
	if _, err := w.Next(done); !errors.Is(err, ErrWatchClosed) {
		t.Fatalf("poll after Close = %v", err)
	}
}

// TestWatchApplyBatchEveryRevision: raft hands the store many committed entries in
// one ApplyBatch (one view publish); a watcher gets the events of every revision of
// the batch, in order, not only the last one's. The batch mixes writes inside and
// outside the watched range, a no-op entry, a failed guard and a read-only
// transaction (no revision).
func TestWatchApplyBatchEveryRevision(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("a/0", "start")))
	w, err := s.Watch(prefixWatch("a/", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	one, err := s.Watch(WatchOptions{Key: []byte("a/1")})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	// Register both with the hub now (a watcher registers at its first Next): the
	// batch must reach them live, not through a replay of the history.
	for _, x := range []*Watcher{w, one} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if gs, err := x.Next(ctx); !errors.Is(err, context.Canceled) || len(gs) > 0 {
			t.Fatalf("first Next of a watch from now: %v, %v", gs, err)
		}
	}
	failed := &Command{Type: CmdTxn, Txn: &Txn{Success: []Op{put("a/9", "no")},
		Compares: []Compare{{Key: []byte("a/1"), Target: TargetVersion, Result: CompareEqual, Int: 9}}}}
	readOnly := &Command{Type: CmdTxn, Txn: &Txn{Success: []Op{{Type: OpGet, Key: []byte("a/1")}}}}
	cmds := []*Command{
		txn(put("a/1", "x")),                   // rev 2
		txn(put("b/1", "out")),                 // rev 3: outside a/
		txn(put("a/2", "y"), put("a/1", "x2")), // rev 4: two events
		nil,                                    // a no-op entry (a configuration change)
		failed,                                 // no revision
		readOnly,                               // no revision
		txn(del("a/2")),                        // rev 5
		txn(put("a/3", "z")),                   // rev 6
	}
	entries := make([]Entry, len(cmds))
	for i, c := range cmds {
		entries[i] = Entry{Index: s.AppliedIndex() + 1 + uint64(i), NoOp: c == nil}
		if c != nil {
			if entries[i].Data, err = EncodeCommand(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.ApplyBatch(entries)
	if s.Revision() != 6 {
		t.Fatalf("revision after the batch = %d, want 6", s.Revision())
	}
	checkEvents(t, "prefix a/", collect(t, w, 6), []wev{
		{2, EventPut, "a/1", "x", "", false},
		{4, EventPut, "a/1", "x2", "x", true},
		{4, EventPut, "a/2", "y", "", false},
		{5, EventDelete, "a/2", "", "y", true},
		{6, EventPut, "a/3", "z", "", false},
	})
	checkEvents(t, "key a/1", collect(t, one, 6), []wev{
		{2, EventPut, "a/1", "x", "", false},
		{4, EventPut, "a/1", "x2", "x", true},
	})
}
