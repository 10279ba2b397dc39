package kv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// Bounds of ?progress=.
const (
	minWatchProgress = 100 * time.Millisecond
	maxWatchProgress = time.Hour
)

// watchReq is a validated watch request.
type watchReq struct {
	opts     fsm.WatchOptions
	prevKV   bool
	progress time.Duration
	cons     fsm.Consistency
}

func (s *Server) parseWatch(r *http.Request) (watchReq, error) {
	var q watchReq
	p, err := parseParams(r, api.ParamPrefix, api.ParamStartRevision, api.ParamPrevKV,
		api.ParamProgress, api.ParamConsistency)
	if err != nil {
		return q, err
	}
	key := r.PathValue("key")
	prefix, err := p.bool(api.ParamPrefix)
	if err != nil {
		return q, err
	}
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
	if q.opts.StartRevision, err = p.int64(api.ParamStartRevision, 0, 0); err != nil {
		return q, err
	}
	if q.prevKV, err = p.bool(api.ParamPrevKV); err != nil {
		return q, err
	}
	if v := p.q.Get(api.ParamProgress); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minWatchProgress || d > maxWatchProgress {
			return q, fmt.Errorf("%w: %s=%q: want a duration between %v and %v",
				ErrInvalidParam, api.ParamProgress, v, minWatchProgress, maxWatchProgress)
		}
		q.progress = d
	}
	if q.cons, err = p.consistency(); err != nil {
		return q, err
	}
	q.opts.Buffer = s.cfg.WatchBuffer
	return q, nil
}

// handleWatch serves GET /v1/watch/{key...} as a stream of api.WatchEvent lines. Any
// node serves it from its applied state. A linearizable start (the default) first
// waits, as a linearizable read does, until the node has applied every write
// acknowledged before the request; the watch then starts after that point when no
// start_revision is given.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) error {
	q, err := s.parseWatch(r)
	if err != nil {
		return err
	}
	if q.opts.End == nil {
		err = checkKey(r.Context(), q.opts.Key, false)
	} else {
		_, err = readFilter(r.Context(), q.opts.Key, q.opts.End)
	}
	if err != nil {
		return err
	}
	var allow func([]byte) bool
	var revoked func() error
	if az := authzOf(r.Context()); az != nil {
		revoked = func() error { _, err := s.current(az); return err }
		// Each event is checked against the rights the token holds when it is sent: a
		// policy change or a deleted token stops the events it no longer allows.
		allow = func(key []byte) bool {
			cur, err := s.current(az)
			return err == nil && cur.key(key, false)
		}
	}
	if n := s.watches.Add(1); s.cfg.MaxWatches > 0 && n > int64(s.cfg.MaxWatches) {
		s.watches.Add(-1)
		return fmt.Errorf("%w: this node serves its maximum of %d", ErrTooManyWatches, s.cfg.MaxWatches)
	}
	defer s.watches.Add(-1)
	ctx, cancel := s.requestContext(r)
	view, err := s.store.View(ctx, q.cons)
	cancel()
	if err != nil {
		return err
	}
	if q.opts.StartRevision == 0 {
		q.opts.StartRevision = view.Revision() + 1
	}
	watcher, err := s.store.Watch(q.opts)
	if err != nil {
		return fmt.Errorf("watch %q: %w", q.opts.Key, err)
	}
	defer watcher.Close()

	// The stream outlives WriteTimeout; each write gets its own deadline instead.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{}) // else ReadTimeout ends the watch's context
	w.Header().Set("Content-Type", api.ContentTypeWatch)
	w.Header().Set(api.HeaderRevision, strconv.FormatInt(view.Revision(), 10))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ws := &watchStream{w: w, rc: rc, bw: bufio.NewWriterSize(w, 4096), prevKV: q.prevKV,
		writeTimeout: s.cfg.WriteTimeout, allow: allow, revoked: revoked}
	ws.enc = json.NewEncoder(ws.bw)
	if err := ws.flush(); err != nil {
		return nil
	}
	s.streamWatch(r.Context(), watcher, ws, q.progress)
	return nil
}

// watchWriter writes one watch stream's lines in its format: /v1/watch's
// api.WatchEvent lines (watchStream) or /apis' typed events (typedWatchStream). An
// error means the client is gone.
type watchWriter interface {
	events(groups []*fsm.RevisionEvents) error
	progress(rev int64) error
	end(err error)
}

// streamWatch copies the watcher's events to ws until the client goes away, the
// server shuts down, or the watch ends (then with an end line).
func (s *Server) streamWatch(ctx context.Context, watcher *fsm.Watcher, ws watchWriter, progress time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.watchStop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var tick <-chan time.Time
	if progress > 0 {
		t := time.NewTicker(progress)
		defer t.Stop()
		tick = t.C
	}
	for {
		nctx, ncancel := ctx, context.CancelFunc(func() {})
		if tick != nil {
			nctx, ncancel = contextUntil(ctx, tick)
		}
		groups, err := watcher.Next(nctx)
		ncancel()
		switch {
		case err == nil:
			if ws.events(groups) != nil {
				return
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.Canceled): // progress tick
			if rev, ok := watcher.Bookmark(); ok {
				if ws.progress(rev) != nil {
					return
				}
			}
		default:
			ws.end(err)
			return
		}
	}
}

// contextUntil is ctx, also cancelled when tick fires.
func contextUntil(ctx context.Context, tick <-chan time.Time) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-tick:
			cancel()
		case <-c.Done():
		}
	}()
	return c, cancel
}

// watchStream writes api.WatchEvent lines.
type watchStream struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	bw           *bufio.Writer
	enc          *json.Encoder
	prevKV       bool
	writeTimeout time.Duration
	// allow, when set, says which keys the token may read: other events are dropped.
	allow func(key []byte) bool
	// revoked, when set, fails once the watch's token is deleted: the watch then ends
	// with a 401 line.
	revoked func() error
}

// checkToken ends the watch when its token was deleted.
func (ws *watchStream) checkToken() error {
	if ws.revoked == nil {
		return nil
	}
	err := ws.revoked()
	if err != nil {
		ws.end(err)
	}
	return err
}

// events writes the events of groups and flushes once: a revision's events travel
// together.
func (ws *watchStream) events(groups []*fsm.RevisionEvents) error {
	if err := ws.checkToken(); err != nil {
		return err
	}
	for _, g := range groups {
		evs := g.Events
		if ws.allow != nil {
			evs = make([]fsm.Event, 0, len(g.Events))
			for _, ev := range g.Events {
				if ws.allow(ev.KV.Key) {
					evs = append(evs, ev)
				}
			}
		}
		for i := range evs {
			ev := &evs[i]
			kv := toAPI(ev.KV)
			line := api.WatchEvent{Type: api.EventPut, KV: &kv, Revision: g.Revision,
				Remaining: len(evs) - 1 - i}
			if ev.Type == fsm.EventDelete {
				line.Type = api.EventDelete
			}
			if ws.prevKV && ev.PrevKV != nil {
				prev := toAPI(*ev.PrevKV)
				line.PrevKV = &prev
			}
			if err := ws.enc.Encode(&line); err != nil {
				return err
			}
		}
	}
	return ws.flush()
}

func (ws *watchStream) progress(rev int64) error {
	if err := ws.checkToken(); err != nil {
		return err
	}
	return ws.line(api.WatchEvent{Type: api.EventProgress, Revision: rev})
}

func (ws *watchStream) line(ev api.WatchEvent) error {
	if err := ws.enc.Encode(&ev); err != nil {
		return err
	}
	return ws.flush()
}

// end writes the END line for a watch that ended with err.
func (ws *watchStream) end(err error) { ws.line(endLine(err)) }

// endLine is the END line of a watch that ended with err.
func endLine(err error) api.WatchEvent {
	line := api.WatchEvent{Type: api.EventEnd, Message: err.Error()}
	var werr *fsm.WatchError
	if errors.As(err, &werr) {
		line.Revision, line.CompactRevision = werr.LastRevision, werr.CompactRevision
	}
	switch {
	case errors.Is(err, fsm.ErrSlowWatcher):
		line.Reason = api.ReasonSlowWatcher
	case errors.Is(err, fsm.ErrCompacted):
		line.Reason = api.ReasonResourceExpired
	case errors.Is(err, fsm.ErrWatchRestored):
		line.Reason = api.ReasonRestored
	case errors.Is(err, ErrUnauthorized):
		line.Reason = api.ReasonUnauthorized
	default:
		line.Reason = api.ReasonInternal
	}
	return line
}

func (ws *watchStream) flush() error {
	if ws.writeTimeout > 0 {
		ws.rc.SetWriteDeadline(time.Now().Add(ws.writeTimeout))
	}
	if err := ws.bw.Flush(); err != nil {
		return err
	}
	return ws.rc.Flush()
}
