package httpapi

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
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
)

// parseWatch reads GET /v1/watch's parameters into the core's request (validated by
// CheckWatch), and whether it requires a leader (refused without leader contact,
// ended on losing it).
func parseWatch(r *http.Request) (kv.WatchRequest, bool, error) {
	p, err := parseParams(r, api.ParamPrefix, api.ParamStartRevision, api.ParamPrevKV,
		api.ParamProgress, api.ParamConsistency, api.ParamRequireLeader)
	if err != nil {
		return kv.WatchRequest{}, false, err
	}
	prefix, err := p.bool(api.ParamPrefix)
	if err != nil {
		return kv.WatchRequest{}, false, err
	}
	start, err := p.int64(api.ParamStartRevision, 0, 0)
	if err != nil {
		return kv.WatchRequest{}, false, err
	}
	prevKV, err := p.bool(api.ParamPrevKV)
	if err != nil {
		return kv.WatchRequest{}, false, err
	}
	progress, err := kv.ParseWatchProgress(p.get(api.ParamProgress))
	if err != nil {
		return kv.WatchRequest{}, false, err
	}
	cons, err := p.consistency()
	if err != nil {
		return kv.WatchRequest{}, false, err
	}
	requireLeader, err := parseRequireLeader(r, p)
	if err != nil {
		return kv.WatchRequest{}, false, err
	}
	req := kv.WatchRequest{Key: []byte(r.PathValue("key")), Prefix: prefix, StartRevision: start, PrevKV: prevKV,
		Progress: progress, Linearizable: cons == fsm.Linearizable}
	return req, requireLeader, nil
}

// parseRequireLeader reads whether a watch requires a leader: the require_leader
// parameter (p must allow it), or the header the Go client sends; either says so.
func parseRequireLeader(r *http.Request, p params) (bool, error) {
	required, err := p.bool(api.ParamRequireLeader)
	if err != nil {
		return false, err
	}
	if v := r.Header.Get(api.HeaderRequireLeader); v != "" {
		h, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%w: header %s: %q is not true or false", kv.ErrInvalidParam, api.HeaderRequireLeader, v)
		}
		required = required || h
	}
	return required, nil
}

// leaderLost is, for a watch that requires a leader, a context that ends (with a
// raft.ErrNoLeader cause) once the node loses leader contact; such a watch is refused
// while the node has none. It is nil for a watch that does not require one.
func (s *Server) leaderLost(required bool) (context.Context, error) {
	if !required {
		return nil, nil
	}
	if err := s.core.LeaderContact(); err != nil {
		return nil, err
	}
	return s.core.LeaderLost(), nil
}

// handleWatch serves GET /v1/watch/{key...} as a stream of api.WatchEvent lines. Any
// node serves it from its applied state. A linearizable start (the default) first
// waits, as a linearizable read does, until the node has applied every write
// acknowledged before the request; the watch then starts after that point when no
// start_revision is given.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) error {
	req, requireLeader, err := parseWatch(r)
	if err != nil {
		return err
	}
	sp, err := s.core.CheckWatch(r.Context(), CallerOf(r), req)
	if err != nil {
		return err
	}
	lost, err := s.leaderLost(requireLeader) // ends the watch on losing leader contact
	if err != nil {
		return err
	}
	if sp.Linearizable() {
		if err := s.core.WaitLinearizable(r.Context()); err != nil {
			return err
		}
	}
	watch, err := s.core.OpenWatch(r.Context(), sp)
	if err != nil {
		return err
	}
	defer watch.Close()
	rev := watch.Revision

	// The stream outlives WriteTimeout; each write gets its own deadline instead.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{}) // else ReadTimeout ends the watch's context
	w.Header().Set("Content-Type", api.ContentTypeWatch)
	w.Header().Set(api.HeaderRevision, strconv.FormatInt(rev, 10))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ws := &watchStream{w: w, rc: rc, bw: bufio.NewWriterSize(w, 4096), prevKV: sp.PrevKV(),
		writeTimeout: s.cfg.WriteTimeout, revoked: watch.RightsLost, last: rev}
	if watch.Filtered() {
		ws.allow = watch.Allowed
	}
	if start := sp.StartRevision(); start > 0 {
		ws.last = start - 1
	}
	ws.enc = json.NewEncoder(ws.bw)
	if err := ws.flush(); err != nil {
		return nil
	}
	s.streamWatch(r.Context(), watch.Watcher, ws, sp.Progress(), lost)
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
// server shuts down, or the watch ends (then with an end line) — also, when lost is
// set, once lost ends with a raft.ErrNoLeader cause (an end line of reason NoLeader).
func (s *Server) streamWatch(ctx context.Context, watcher *fsm.Watcher, ws watchWriter, progress time.Duration,
	lost context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if lost != nil {
		stop := context.AfterFunc(lost, func() { cancel(context.Cause(lost)) })
		defer stop()
	}
	go func() {
		select {
		case <-s.core.Stopping():
			cancel(nil)
		case <-ctx.Done():
		}
	}()
	pumpWatch(ctx, watcher, ws, progress)
}

// pumpWatch copies the watcher's events to ws, with a progress notification every
// progress (0: none) while nothing is pending, until ctx is done or the watch ends
// (then with ws.end). It starts no goroutine: an idle watch costs one blocked
// goroutine, its caller's.
func pumpWatch(ctx context.Context, watcher *fsm.Watcher, ws watchWriter, progress time.Duration) {
	var due time.Time
	if progress > 0 {
		due = time.Now().Add(progress)
	}
	for {
		nctx, ncancel := ctx, context.CancelFunc(func() {})
		if progress > 0 {
			nctx, ncancel = context.WithDeadline(ctx, due)
		}
		groups, err := watcher.Next(nctx)
		ncancel()
		switch {
		case err == nil:
			if ws.events(groups) != nil {
				return
			}
		case ctx.Err() != nil:
			if cause := context.Cause(ctx); errors.Is(cause, raft.ErrNoLeader) {
				ws.end(cause)
			}
			return
		case errors.Is(err, context.DeadlineExceeded): // progress is due
			due = time.Now().Add(progress)
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
	last    int64 // the last revision whose events were all sent
}

// checkToken ends the watch when its token was deleted.
func (ws *watchStream) checkToken() error { return rightsLost(ws.revoked, ws.end) }

// rightsLost runs a watch's rights check (nil when ACLs are not enforced) and, when
// it fails, ends the watch with end.
func rightsLost(check func() error, end func(error)) error {
	if check == nil {
		return nil
	}
	err := check()
	if err != nil {
		end(err)
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
		ws.last = g.Revision
		for i := range evs {
			ev := &evs[i]
			item := kv.APIKV(ev.KV)
			line := api.WatchEvent{Type: api.EventPut, KV: &item, Revision: g.Revision,
				Remaining: len(evs) - 1 - i}
			if ev.Type == fsm.EventDelete {
				line.Type = api.EventDelete
			}
			if ws.prevKV && ev.PrevKV != nil {
				prev := kv.APIKV(*ev.PrevKV)
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
	ws.last = max(ws.last, rev)
	return ws.line(api.WatchEvent{Type: api.EventProgress, Revision: rev})
}

func (ws *watchStream) line(ev api.WatchEvent) error {
	if err := ws.enc.Encode(&ev); err != nil {
		return err
	}
	return ws.flush()
}

// end writes the END line for a watch that ended with err.
func (ws *watchStream) end(err error) {
	line := kv.WatchEnd(err)
	if line.Reason == api.ReasonNoLeader {
		line.Revision = ws.last
	}
	ws.line(line)
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
