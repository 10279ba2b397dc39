package fsm

import (
	"bytes"
	"context"
	"slices"
	"sync"
)

// catchUpSlack is how far behind the head a replay may end and still register: a
// watcher further behind replays from a view without registering first, so that its
// queue does not fill with live events while a long replay runs.
const catchUpSlack = 256

// Watcher is one watch (see the comment at the top of watch.go). Next and Bookmark are
// for one consumer goroutine; Close may be called from any goroutine, once or more.
type Watcher struct {
	s        *Store
	key, end []byte // end nil: key alone; end empty: no upper bound
	limit    int
	wake     chan struct{} // cap 1: the dispatcher queued something or ended the watch; nil with notify
	notify   func()        // WatchOptions.Notify
	epoch    uint64        // hub epoch when the watch began

	// Consumer state, owned by the goroutine calling Next.
	next       int64 // first revision not yet returned (or skipped as not matching)
	registered bool
	passes     int // replays done without registering

	// from is the first revision the hub delivers; set before registration, then
	// read-only.
	from int64

	mu struct {
		sync.Mutex
		queue  []*RevisionEvents
		queued int   // events in queue
		upTo   int64 // every revision <= upTo is in queue or did not match
		err    error // the watch's end, returned once queue is drained
		closed bool
	}
}

// Next returns the next revisions of the watch, in order, waiting for them until ctx is
// done. With a done ctx it is a poll: ctx's error means nothing is ready yet. The groups are shared with other watchers: read-only. It fails with a
// *WatchError when the watch ends (slow, compacted, restored), with ctx's error, or with
// ErrWatchClosed after Close.
func (w *Watcher) Next(ctx context.Context) ([]*RevisionEvents, error) {
	for {
		if !w.registered {
			out, err := w.catchUp()
			if err != nil || len(out) > 0 {
				return out, err
			}
			continue
		}
		w.mu.Lock()
		if q := w.mu.queue; len(q) > 0 {
			w.mu.queue, w.mu.queued = nil, 0
			w.mu.Unlock()
			w.next = q[len(q)-1].Revision + 1
			return q, nil
		}
		err := w.mu.err
		w.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Bookmark returns the revision up to which every event of the range has been returned
// by Next, when nothing is waiting to be returned (ok false otherwise). An idle watcher
// reports the store's applied revision as its dispatcher sees it.
func (w *Watcher) Bookmark() (rev int64, ok bool) {
	if !w.registered {
		return w.next - 1, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mu.queue) > 0 || w.mu.err != nil {
		return 0, false
	}
	return max(w.mu.upTo, w.next-1), true
}

// Close ends the watch and releases its registration. Safe to call concurrently with
// Next (which then fails with ErrWatchClosed) and more than once.
func (w *Watcher) Close() {
	w.mu.Lock()
	if !w.mu.closed {
		w.mu.closed = true
		w.mu.queue, w.mu.queued = nil, 0
		if w.mu.err == nil {
			w.mu.err = ErrWatchClosed
		}
	}
	w.mu.Unlock()
	w.s.watchHub().remove(w)
	w.signal()
}

func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
	if w.notify != nil {
		w.notify()
	}
}

// catchUp replays history from w.next. Far behind the head it replays from the latest
// view without registering; near it, it registers at the store's revision H and
// replays up to H, after which the hub delivers from H+1.
func (w *Watcher) catchUp() ([]*RevisionEvents, error) {
	if err := w.closedErr(); err != nil {
		return nil, err
	}
	h := w.s.watchHub()
	if w.passes < 3 {
		w.passes++
		v := w.s.View()
		if h.epoch.Load() != w.epoch {
			return nil, &WatchError{Err: ErrWatchRestored, LastRevision: w.next - 1}
		}
		if v.Revision()-w.next >= catchUpSlack {
			to := v.Revision()
			out, err := w.replay(v, to)
			if err == nil {
				w.next = to + 1
			}
			return out, err
		}
	}
	s := w.s
	s.mu.Lock()
	head := s.cur.revision
	v := s.view.Load()
	if h.epoch.Load() != w.epoch {
		s.mu.Unlock()
		return nil, &WatchError{Err: ErrWatchRestored, LastRevision: w.next - 1}
	}
	w.from = max(w.next, head+1)
	w.mu.Lock()
	w.mu.upTo = head
	closed := w.mu.closed
	w.mu.Unlock()
	if !closed {
		h.add(w)
	}
	s.mu.Unlock()
	if closed {
		return nil, ErrWatchClosed
	}
	w.registered = true
	out, err := w.replay(v, head)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.next = max(w.next, head+1)
	return out, nil
}

func (w *Watcher) closedErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closed {
		return ErrWatchClosed
	}
	return nil
}

// replay reads the events of [w.next, to] in w's range from v's history.
func (w *Watcher) replay(v *View, to int64) ([]*RevisionEvents, error) {
	if w.next > to {
		return nil, nil
	}
	if w.next < v.st.compactRev {
		return nil, &WatchError{Err: ErrCompacted, LastRevision: w.next - 1, CompactRevision: v.st.compactRev}
	}
	return v.changes(w.key, w.end, w.next, to), nil
}

// changes returns the events of revisions [from, to] of the keys in [key, end) (end
// nil: key alone), grouped by revision in revision order, each group in key order.
// The caller checked that from is at or above the compact revision, so every version
// it needs above the compact revision, and the one before it, is still in the history.
func (v *View) changes(key, end []byte, from, to int64) []*RevisionEvents {
	type hit struct {
		rev int64
		ev  Event
	}
	var hits []hit
	compact := v.st.compactRev
	visit := func(e *entry) bool {
		for ver := e.hist; ver != nil && ver.mod >= from; ver = ver.next {
			switch {
			case ver.mod > to:
			case ver.mod != compact:
				hits = append(hits, hit{ver.mod, eventOf(e.key, ver)})
			default:
				// The compact revision's own events, the same on every replica whether
				// CompactStep has run yet or not: its puts and deletes (compaction
				// keeps a tombstone at the compact revision, as etcd does), without
				// the version before them (reclaimed or about to be; etcd reads
				// prev_kv at revision-1, compacted, and finds none).
				ev := eventOf(e.key, ver)
				ev.PrevKV = nil
				hits = append(hits, hit{ver.mod, ev})
			}
		}
		return true
	}
	if end == nil {
		if e, ok := v.st.tree.Get(&entry{key: key}); ok {
			visit(e)
		}
	} else {
		ascendTree(v.st.tree, key, end, visit)
	}
	// Keys were visited in order: a stable sort by revision keeps key order within one.
	slices.SortStableFunc(hits, func(a, b hit) int { return cmpInt(a.rev, b.rev) })
	var out []*RevisionEvents
	for _, h := range hits {
		if len(out) == 0 || out[len(out)-1].Revision != h.rev {
			out = append(out, &RevisionEvents{Revision: h.rev})
		}
		g := out[len(out)-1]
		g.Events = append(g.Events, h.ev)
	}
	return out
}

// contains says whether key is in w's range.
func (w *Watcher) contains(key []byte) bool {
	if w.end == nil {
		return bytes.Equal(key, w.key)
	}
	return bytes.Compare(key, w.key) >= 0 && (len(w.end) == 0 || bytes.Compare(key, w.end) < 0)
}

// match returns the part of g in w's range: g itself when all of it is, nil when none.
func (w *Watcher) match(g *RevisionEvents) *RevisionEvents {
	n := 0
	for _, ev := range g.Events {
		if w.contains(ev.KV.Key) {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(g.Events):
		return g
	}
	sub := &RevisionEvents{Revision: g.Revision, Events: make([]Event, 0, n)}
	for _, ev := range g.Events {
		if w.contains(ev.KV.Key) {
			sub.Events = append(sub.Events, ev)
		}
	}
	return sub
}

// deliver queues the parts of items in w's range (dispatcher goroutine) and reports
// whether w must be signaled (something queued, or the watch ended); the dispatcher
// signals once it has delivered to every watcher. It never blocks: a queue that
// would pass its bound ends the watch instead.
func (w *Watcher) deliver(items []hubItem) (signal bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil {
		return false
	}
	queued := len(w.mu.queue)
	defer func() { signal = len(w.mu.queue) > queued || w.mu.err != nil }()
	for _, it := range items {
		if it.restore != 0 {
			if w.epoch < it.restore {
				w.mu.err = &WatchError{Err: ErrWatchRestored, LastRevision: w.mu.upTo}
				return
			}
			continue
		}
		for _, g := range it.groups {
			if g.Revision < w.from {
				continue
			}
			m := w.match(g)
			if m == nil {
				continue
			}
			if w.mu.queued > 0 && w.mu.queued+len(m.Events) > w.limit {
				w.mu.err = &WatchError{Err: ErrSlowWatcher, LastRevision: g.Revision - 1}
				w.s.slowEnded.Add(1)
				w.mu.upTo = g.Revision - 1
				return
			}
			w.mu.queue = append(w.mu.queue, m)
			w.mu.queued += len(m.Events)
		}
		w.mu.upTo = max(w.mu.upTo, it.rev)
	}
	return
}
