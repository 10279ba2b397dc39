package kv

import (
	"context"
	"fmt"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// The core's watches (see core.go): CheckWatch validates a request and checks the
// caller's rights, OpenWatch opens it (the watch bounds, the watcher); Watch does both.
// A door that batches starts (the stream protocol) checks each at once, waits once for
// every linearizable start of a batch (WaitLinearizable), then opens them.

// WatchRequest is a watch of one key, of every key with the prefix Key (Prefix; ""
// for every key), or of the keys of [Key, End).
type WatchRequest struct {
	Key, End      []byte
	Prefix        bool
	StartRevision int64         // 0: after the node's revision when it opens
	PrevKV        bool          // events carry the key's previous value
	Progress      time.Duration // progress notifications (0: none), in [100ms, 1h]
	Linearizable  bool          // the start waits until the node has applied every acknowledged write
	Notify        func()        // called (without blocking) when the watch may have events
}

// Bounds of a watch's progress interval (?progress=, the stream's progress).
const (
	minWatchProgress = 100 * time.Millisecond
	maxWatchProgress = time.Hour
)

// MinWatchProgress is the shortest interval of progress notifications a watch may ask.
const MinWatchProgress = minWatchProgress

// ParseWatchProgress parses a watch's progress interval as a door receives it ("5s";
// "" is none: 0) and holds it to its bounds, for the KV and the typed watches alike.
func ParseWatchProgress(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, progressError(v)
	}
	if err := checkWatchProgress(d); err != nil {
		return 0, err
	}
	return d, nil
}

// ParseBookmarkInterval is ParseWatchProgress for a typed watch's bookmarks, which
// the client asked for: an explicit interval of zero is refused, not read as none.
func ParseBookmarkInterval(v string) (time.Duration, error) {
	d, err := ParseWatchProgress(v)
	if err == nil && d == 0 {
		err = progressError(v)
	}
	return d, err
}

// checkWatchProgress holds a progress interval (0: none) to its bounds.
func checkWatchProgress(d time.Duration) error {
	if d != 0 && (d < minWatchProgress || d > maxWatchProgress) {
		return progressError(d.String())
	}
	return nil
}

func progressError(v string) error {
	return fmt.Errorf("%w: %s=%q: want a duration between %v and %v",
		ErrInvalidParam, api.ParamProgress, v, minWatchProgress, maxWatchProgress)
}

// WatchSpec is a watch request CheckWatch accepted, ready to open.
type WatchSpec struct {
	q      watchReq
	c      Caller
	notify func()
}

// Linearizable reports whether the watch's start must wait for the node to catch up
// with the leader (WaitLinearizable) before it opens.
func (sp WatchSpec) Linearizable() bool { return sp.q.cons == fsm.Linearizable }

// StartRevision is the requested start revision (0: after the node's revision).
func (sp WatchSpec) StartRevision() int64 { return sp.q.opts.StartRevision }

// Progress is the interval of progress notifications (0: none).
func (sp WatchSpec) Progress() time.Duration { return sp.q.progress }

// PrevKV reports whether events carry the key's previous value.
func (sp WatchSpec) PrevKV() bool { return sp.q.prevKV }

// CheckWatch validates r (a range is validated as a ranged get's) and refuses it
// unless c, with the rights it holds now, may read some of what it watches.
func (s *Server) CheckWatch(ctx context.Context, c Caller, r WatchRequest) (WatchSpec, error) {
	key := string(r.Key)
	var end []byte
	if r.End != nil {
		op, err := s.lim.op(api.Op{Type: api.OpGet, Key: key, End: string(r.End)})
		if err != nil {
			return WatchSpec{}, err
		}
		end = op.End
	}
	cons := fsm.Serializable
	if r.Linearizable {
		cons = fsm.Linearizable
	}
	q, err := s.newWatchReq(key, r.Prefix && r.End == nil, r.StartRevision, r.PrevKV, r.Progress, cons)
	if err != nil {
		return WatchSpec{}, err
	}
	if end != nil {
		q.opts.End = end
	}
	if err := s.checkWatchStart(c.context(ctx), q); err != nil {
		return WatchSpec{}, err
	}
	return WatchSpec{q: q, c: c, notify: r.Notify}, nil
}

// WaitLinearizable waits until the node has applied every write acknowledged before
// the call (one read-index round): the start of every linearizable watch checked
// before it.
func (s *Server) WaitLinearizable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	_, err := s.store.View(ctx, fsm.Linearizable)
	return err
}

// OpenWatch opens a watch CheckWatch accepted, from the node's applied state: a
// linearizable one only after WaitLinearizable. It takes a watch slot (the per-token
// and node bounds).
func (s *Server) OpenWatch(ctx context.Context, sp WatchSpec) (*Watch, error) {
	q := sp.q
	q.cons = fsm.Serializable
	q.opts.Notify = sp.notify
	ctx = sp.c.context(ctx)
	allow, revoked := s.watchRights(ctx)
	watcher, rev, done, err := s.openWatch(ctx, q)
	if err != nil {
		return nil, err
	}
	return &Watch{Watcher: watcher, Revision: rev, allow: allow, revoked: revoked, done: done}, nil
}

// Watch checks and opens a watch for c (CheckWatch, WaitLinearizable when asked,
// OpenWatch).
func (s *Server) Watch(ctx context.Context, c Caller, r WatchRequest) (*Watch, error) {
	sp, err := s.CheckWatch(ctx, c, r)
	if err != nil {
		return nil, err
	}
	if sp.Linearizable() {
		if err := s.WaitLinearizable(ctx); err != nil {
			return nil, err
		}
	}
	return s.OpenWatch(ctx, sp)
}

// Watch is an open watch. Its events are the watcher's; before sending each batch the
// door asks RightsLost, and drops the events of keys Allowed refuses.
type Watch struct {
	*fsm.Watcher
	// Revision is the node's revision when the watch opened.
	Revision int64
	allow    func([]byte) bool
	revoked  func() error
	done     func()
}

// Allowed reports whether the watch's caller may read key now (policies change while
// a watch runs).
func (w *Watch) Allowed(key []byte) bool { return w.allow == nil || w.allow(key) }

// Filtered reports whether the watch's events are filtered by the caller's rights
// (Allowed can refuse a key).
func (w *Watch) Filtered() bool { return w.allow != nil }

// RightsLost is ErrUnauthorized once the watch's token is deleted or expired: the
// watch must end.
func (w *Watch) RightsLost() error {
	if w.revoked == nil {
		return nil
	}
	return w.revoked()
}

// Close ends the watch and gives back its slot.
func (w *Watch) Close() { w.done() }

// Watches is the number of watches the node serves now, through every door.
func (s *Server) Watches() int64 { return s.watches.Load() }

// The watch start behind CheckWatch and OpenWatch.

// watchReq is a validated watch request.
type watchReq struct {
	opts     fsm.WatchOptions
	prevKV   bool
	progress time.Duration
	cons     fsm.Consistency
}

// newWatchReq validates a watch of key (or the prefix key), the same for HTTP and the
// stream protocol. progress 0 means no progress notifications.
func (s *Server) newWatchReq(key string, prefix bool, start int64, prevKV bool, progress time.Duration,
	cons fsm.Consistency) (watchReq, error) {
	q := watchReq{prevKV: prevKV, progress: progress, cons: cons}
	if !(prefix && key == "") {
		if err := s.lim.checkKey(key); err != nil {
			return q, err
		}
	}
	q.opts.Key = []byte(key)
	if prefix {
		q.opts.End = fsm.PrefixEnd(q.opts.Key)
		if q.opts.End == nil {
			q.opts.End = []byte{} // no upper bound
		}
	}
	if start < 0 {
		return q, fmt.Errorf("%w: %s %d is negative", ErrInvalidParam, api.ParamStartRevision, start)
	}
	q.opts.StartRevision = start
	if err := checkWatchProgress(progress); err != nil {
		return q, err
	}
	q.opts.Buffer = s.cfg.WatchBuffer
	return q, nil
}

// openWatch takes a watch slot (acquireWatch), waits for its start's consistency
// (a linearizable start catches up with the leader's commit index first), and starts
// its watcher from q's start revision, or from after the view's revision. It returns
// the view's revision; done closes the watcher and releases the count.
func (s *Server) openWatch(ctx context.Context, q watchReq) (w *fsm.Watcher, rev int64, done func(), err error) {
	release, err := s.acquireWatch(ctx)
	if err != nil {
		return nil, 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	view, err := s.store.View(ctx, q.cons)
	cancel()
	if err != nil {
		release()
		return nil, 0, nil, err
	}
	if q.opts.StartRevision == 0 {
		q.opts.StartRevision = view.Revision() + 1
	}
	watcher, err := s.store.Watch(q.opts)
	if err != nil {
		release()
		return nil, 0, nil, fmt.Errorf("watch %q: %w", q.opts.Key, err)
	}
	return watcher, view.Revision(), func() { watcher.Close(); release() }, nil
}

// contactContext is live while the node has leader contact and is cancelled, with a
// raft.ErrNoLeader cause, once it loses it; nil for a store that cannot lose it.
func (s *Server) contactContext() context.Context {
	if cc, ok := s.store.(interface{ ContactContext() context.Context }); ok {
		return cc.ContactContext()
	}
	return nil
}

// watchRights returns, for a watch made with ctx's token, which event keys the token
// may read now (allow) and a check that fails once the token is deleted (revoked); both
// nil when ACLs are not enforced. Each event is checked against the rights the token
// holds when it is sent: a policy change or a deleted token stops the events it no
// longer allows.
func (s *Server) watchRights(ctx context.Context) (allow func([]byte) bool, revoked func() error) {
	az := authzOf(ctx)
	if az == nil {
		return nil, nil
	}
	revoked = func() error { _, err := s.current(az); return err }
	allow = func(key []byte) bool {
		cur, err := s.current(az)
		return err == nil && cur.Key(key, false)
	}
	return allow, revoked
}

// checkWatchStart refuses a watch whose token (as it is now) may read nothing of its
// key or range.
func (s *Server) checkWatchStart(ctx context.Context, q watchReq) error {
	if az := authzOf(ctx); az != nil {
		cur, err := s.current(az)
		if err != nil {
			return err
		}
		ctx = context.WithValue(ctx, authzKey{}, cur)
	}
	if q.opts.End == nil {
		return checkKey(ctx, q.opts.Key, false)
	}
	_, err := readFilter(ctx, q.opts.Key, q.opts.End)
	return err
}
