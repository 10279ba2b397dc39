package kv

import (
	"context"
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

// MinWatchProgress is the shortest interval of progress notifications a watch may ask.
const MinWatchProgress = minWatchProgress

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

// WatchEnd is the end event of a watch that ended with err, in keel's wire form (the
// reason a client acts on, and the revisions it resumes from).
func WatchEnd(err error) api.WatchEvent { return endLine(err) }

// Watches is the number of watches the node serves now, through every door.
func (s *Server) Watches() int64 { return s.watches.Load() }
