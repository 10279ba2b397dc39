package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// A watch delivers, in revision order, every change to a key range from a start
// revision on, with no gap and no duplicate. It has two phases:
//
//  1. Replay: the watcher reads [start, H] from an immutable View (the MVCC history
//     holds every version since the compact revision), on the consumer's goroutine.
//  2. Live: the watcher is registered with the store's hub at revision H, under the
//     store lock, so H is exactly the revision of the view it replays from; the apply
//     path hands every later revision's events to the hub, which copies the matching
//     ones into the watcher's bounded queue.
//
// Worked example. Writes: a=1 @5, b=1 @6, a=2 @7. A watcher of prefix "" from 5 is
// started while the store is at 6 and registered at H=6 (the registration waits for the
// store lock, so no apply is half done). Replay of [5, 6] from the view at 6 yields
// {5: put a}, {6: put b}; revision 7 is applied after the registration, so the hub
// queues {7: put a} for the watcher (its `from` is 7). Events of revisions <= 6 still in
// the hub's inbox are skipped by `from`. Nothing is read twice and nothing is missed.
//
// A replay far behind the head is done first without registering (the queue would
// fill while a long replay runs), and only the last short step registers.
//
// The apply path never waits for watchers: it builds each written revision's events
// (it knows the keys it changed) only while some watcher exists, appends them to the
// hub's inbox and wakes the hub's dispatcher goroutine. The dispatcher fans out to the
// watchers' queues without ever blocking: a watcher whose queue would exceed its bound
// is ended with ErrSlowWatcher and the last revision it has been given in full (its
// client resumes from the next one, which is replayed from history). A restore from a
// snapshot ends every watcher (ErrWatchRestored): the state jumped.

// EventType is the kind of a watch event.
type EventType uint8

const (
	EventPut    EventType = 1 // the key was created or updated
	EventDelete EventType = 2 // the key was deleted
)

func (t EventType) String() string {
	if t == EventDelete {
		return "DELETE"
	}
	return "PUT"
}

// Event is one change of one key at one revision.
type Event struct {
	Type EventType
	// KV is the key after the change. For a delete only Key and ModRevision (the
	// delete's revision) are set, as in etcd.
	KV KeyValue
	// PrevKV is the key before the change, nil when it did not exist.
	PrevKV *KeyValue
}

// RevisionEvents is what one revision (one transaction) changed in a watcher's range,
// in key order. Values handed to watchers are shared between them: read-only.
type RevisionEvents struct {
	Revision int64
	Events   []Event
}

// WatchError ends a watch: Err is ErrSlowWatcher, ErrCompacted or ErrWatchRestored.
// Every event of every revision <= LastRevision in the watcher's range has been
// returned by Next; a client resumes with StartRevision = LastRevision+1.
type WatchError struct {
	Err             error
	LastRevision    int64
	CompactRevision int64 // ErrCompacted: the store's compact revision
}

func (e *WatchError) Error() string {
	if e.CompactRevision > 0 {
		return fmt.Sprintf("%v (last revision %d, compact revision %d)", e.Err, e.LastRevision, e.CompactRevision)
	}
	return fmt.Sprintf("%v (last revision %d)", e.Err, e.LastRevision)
}

func (e *WatchError) Unwrap() error { return e.Err }

// DefaultWatchBuffer is WatchOptions.Buffer when it is 0.
const DefaultWatchBuffer = 1024

// WatchOptions says what a watcher sees.
type WatchOptions struct {
	// Key, End: the range [Key, End). End nil watches Key alone; End empty (non-nil)
	// watches every key from Key on (see PrefixEnd for a prefix).
	Key, End []byte
	// StartRevision is the first revision to deliver; 0 means the revision after the
	// latest one. It must be at or above the compact revision (ErrCompacted otherwise),
	// as on etcd; the compact revision's own events come without their previous
	// versions, as etcd's do (see View.changes).
	StartRevision int64
	// Buffer bounds the events queued for the watcher and not yet taken by Next; 0 is
	// DefaultWatchBuffer. One revision larger than the bound is still queued whole when
	// the queue is empty.
	Buffer int
	// Notify, when set, is called each time Next may have something new to return
	// (events queued, the watch ended), from the hub's dispatcher or Close: it must
	// not block. It lets a caller serve many watchers from one goroutine that polls
	// Next with a done context instead of blocking a goroutine in each; with Notify,
	// Next does not wait (an idle watch then holds no channel): it returns ctx's error
	// once ctx is done, so it must be called with a done ctx.
	Notify func()
}

// hub fans applied revisions out to registered watchers. The apply path adds to the
// inbox (publish); one dispatcher goroutine at a time drains it. The dispatcher is
// started by publish when work arrives and exits when the inbox is empty, so an idle
// store runs no goroutine; nothing outside owns it.
type hub struct {
	n     atomic.Int32  // registered watchers; read by the apply path
	epoch atomic.Uint64 // restores so far; a watcher started in an older epoch ends

	mu struct {
		sync.Mutex
		watchers map[*Watcher]struct{}
		inbox    []hubItem
		running  bool
	}
}

// hubItem is what one publish hands the dispatcher: the events of the revisions
// applied since the last publish, up to revision rev; or a restore marker.
type hubItem struct {
	groups  []*RevisionEvents
	rev     int64
	restore uint64 // non-zero: the store was restored; ends watchers of older epochs
}

func newHub() *hub {
	h := &hub{}
	h.mu.watchers = make(map[*Watcher]struct{})
	return h
}

// publish queues an item for the dispatcher, starting it if idle. Called with the
// store lock held; it takes only the hub lock, briefly.
func (h *hub) publish(it hubItem) {
	h.mu.Lock()
	h.mu.inbox = append(h.mu.inbox, it)
	start := !h.mu.running
	h.mu.running = true
	h.mu.Unlock()
	if start {
		go h.dispatch()
	}
}

// dispatch drains the inbox in order and delivers each batch to every watcher.
func (h *hub) dispatch() {
	var ws []*Watcher
	for {
		h.mu.Lock()
		items := h.mu.inbox
		h.mu.inbox = nil
		if len(items) == 0 {
			h.mu.running = false
			h.mu.Unlock()
			return
		}
		ws = ws[:0]
		for w := range h.mu.watchers {
			ws = append(ws, w)
		}
		h.mu.Unlock()
		// Deliver to every watcher first, then signal those that got something: a
		// consumer that serves many watchers (a stream connection's pump) wakes to
		// find all of them ready at once, and sends a revision shared by many in one
		// frame.
		n := 0
		for _, w := range ws {
			if w.deliver(items) {
				ws[n] = w
				n++
			}
		}
		for _, w := range ws[:n] {
			w.signal()
		}
		clear(ws)
	}
}

// Watchers is the number of watches registered with the store's fan-out now (a watch
// still replaying history far behind the head is not yet registered).
func (s *Store) Watchers() int {
	if h := s.hubPtr.Load(); h != nil {
		return int(h.n.Load())
	}
	return 0
}

// SlowWatchersEnded counts the watches the store has ended with ErrSlowWatcher since
// it was created: their consumers fell a queue's bound behind (etcd keeps such
// watchers as "slow"; keel ends them and the client resumes).
func (s *Store) SlowWatchersEnded() uint64 { return s.slowEnded.Load() }

func (h *hub) add(w *Watcher) {
	h.mu.Lock()
	h.mu.watchers[w] = struct{}{}
	h.mu.Unlock()
	h.n.Add(1)
}

func (h *hub) remove(w *Watcher) {
	h.mu.Lock()
	_, ok := h.mu.watchers[w]
	delete(h.mu.watchers, w)
	h.mu.Unlock()
	if ok {
		h.n.Add(-1)
	}
}

// Watch starts a watcher of opts' range. It only checks the options and the start
// revision against the compact revision; the replay runs in the watcher's Next. The
// caller must Close the watcher.
func (s *Store) Watch(opts WatchOptions) (*Watcher, error) {
	if len(opts.Key) == 0 && opts.End == nil {
		return nil, fmt.Errorf("%w: watch of an empty key", ErrInvalidCommand)
	}
	if len(opts.End) > 0 && bytes.Compare(opts.End, opts.Key) <= 0 {
		return nil, fmt.Errorf("%w: watch range end %q is not after start %q", ErrInvalidCommand, opts.End, opts.Key)
	}
	if opts.StartRevision < 0 || opts.Buffer < 0 {
		return nil, fmt.Errorf("%w: negative start revision or buffer", ErrInvalidCommand)
	}
	h := s.watchHub()
	w := &Watcher{s: s, key: bytes.Clone(opts.Key), end: opts.End, limit: opts.Buffer, notify: opts.Notify}
	if opts.Notify == nil {
		w.wake = make(chan struct{}, 1) // a consumer that blocks in Next waits on it
	}
	if w.limit == 0 {
		w.limit = DefaultWatchBuffer
	}
	if opts.End != nil {
		w.end = bytes.Clone(opts.End)
		if w.end == nil {
			w.end = []byte{}
		}
	}
	w.epoch = h.epoch.Load()
	v := s.View()
	w.next = opts.StartRevision
	if w.next == 0 {
		w.next = v.Revision() + 1
	}
	if w.next < v.CompactRevision() {
		return nil, &WatchError{Err: ErrCompacted, LastRevision: w.next - 1, CompactRevision: v.CompactRevision()}
	}
	return w, nil
}

// watchHub returns the store's hub, creating it on first use.
func (s *Store) watchHub() *hub {
	if h := s.hubPtr.Load(); h != nil {
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hubPtr.Load() == nil {
		s.hubPtr.Store(newHub())
	}
	return s.hubPtr.Load()
}

// watching says whether the apply path must record events: some watcher is
// registered. Registration holds the store lock, so a watcher registered before an
// apply began is always seen by it.
func (s *Store) watching() bool {
	h := s.hubPtr.Load()
	return h != nil && h.n.Load() > 0
}

// noteWriteLocked records a key written by the running transaction (apply path hook).
func (s *Store) noteWriteLocked(key []byte) {
	if s.watching() {
		s.watch.changed = append(s.watch.changed, key)
	}
}

// eventsLocked turns the keys the transaction at rev wrote into that revision's events
// (apply path hook, at the end of every transaction). A key written and then deleted
// by the same transaction has no version at rev and no event.
func (s *Store) eventsLocked(rev int64, wrote bool) {
	changed := s.watch.changed
	s.watch.changed = changed[:0]
	defer clear(changed)
	if !wrote || !s.watching() {
		return
	}
	slices.SortFunc(changed, bytes.Compare)
	changed = slices.CompactFunc(changed, bytes.Equal)
	g := &RevisionEvents{Revision: rev, Events: make([]Event, 0, len(changed))}
	for _, k := range changed {
		e, ok := s.cur.tree.Get(&entry{key: k})
		if !ok || e.hist == nil || e.hist.mod != rev {
			continue
		}
		g.Events = append(g.Events, eventOf(e.key, e.hist))
	}
	s.watch.out = append(s.watch.out, g)
}

// flushEventsLocked hands the events recorded since the last publish to the hub
// (hook in publishLocked, after the new view is visible).
func (s *Store) flushEventsLocked() {
	if len(s.watch.out) == 0 {
		return
	}
	out := s.watch.out
	s.watch.out = nil
	s.hubPtr.Load().publish(hubItem{groups: out, rev: s.cur.revision})
}

// restoredLocked ends every watcher started before a restore (hook in Restore).
func (s *Store) restoredLocked() {
	s.watch.out = nil
	h := s.hubPtr.Load()
	if h == nil {
		return
	}
	e := h.epoch.Add(1)
	h.publish(hubItem{restore: e, rev: s.cur.revision})
}

// eventOf is the event of version v of key, which v's revision wrote.
func eventOf(key []byte, v *version) Event {
	ev := Event{Type: EventPut, KV: v.keyValue(key)}
	if v.tombstone() {
		ev = Event{Type: EventDelete, KV: KeyValue{Key: key, ModRevision: v.mod}}
	}
	if p := v.next; p != nil && !p.tombstone() {
		kv := p.keyValue(key)
		ev.PrevKV = &kv
	}
	return ev
}

// watchState is the apply path's per-store scratch for watch events; guarded by the
// store lock.
type watchState struct {
	changed [][]byte          // keys written by the running transaction
	out     []*RevisionEvents // revisions applied since the last publish
}
