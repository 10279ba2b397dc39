package kv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// Types of a typed watch event (Kubernetes' watch.EventType).
const (
	typedAdded    = "ADDED"
	typedModified = "MODIFIED"
	typedDeleted  = "DELETED"
	typedBookmark = "BOOKMARK"
	typedError    = "ERROR"
)

// typedBookmarkInterval is the default interval of BOOKMARK events when the watch
// asks for them (allowWatchBookmarks=true) without ?progress=.
const typedBookmarkInterval = 5 * time.Second

// typedEvent is one line of a typed watch, in the shape Kubernetes informers read:
//
//	{"type":"ADDED","object":{"apiVersion":"apps/v1","metadata":{"name":"w1","revision":7},...}}
//	{"type":"DELETED","object":{...the object as it was, "metadata":{...,"revision":9}}}
//	{"type":"BOOKMARK","object":{"apiVersion":"apps/v1","metadata":{"revision":12}}}
//	{"type":"ERROR","object":{"kind":"Status","code":422,"reason":"Undecodable","details":{"name":"w2","revision":8},...}}
type typedEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

// typedStatus is an ERROR event's object, after Kubernetes' metav1.Status.
type typedStatus struct {
	Kind    string        `json:"kind"`
	Status  string        `json:"status"`
	Code    int           `json:"code"`
	Reason  string        `json:"reason"`
	Message string        `json:"message"`
	Details typedStatusOf `json:"details"`
}

// typedStatusOf says what an ERROR event is about: one object (Name, at Revision),
// or, for the event that ends the stream, the last revision whose events were all
// sent (resume with resourceVersion=Revision).
type typedStatusOf struct {
	Group    string `json:"group"`
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	Revision int64  `json:"revision,omitempty"`
}

// typedWatchReq is a validated typed watch request.
type typedWatchReq struct {
	fromRev   int64 // resourceVersion; 0 = the current state as ADDED events first
	bookmarks time.Duration
	cons      fsm.Consistency
}

func parseTypedWatch(r *http.Request) (typedWatchReq, error) {
	var q typedWatchReq
	p, err := parseParams(r, "watch", "resourceVersion", "allowWatchBookmarks", api.ParamProgress, api.ParamConsistency)
	if err != nil {
		return q, err
	}
	if q.fromRev, err = p.int64("resourceVersion", 0, 0); err != nil {
		return q, err
	}
	bookmarks, err := p.bool("allowWatchBookmarks")
	if err != nil {
		return q, err
	}
	if bookmarks {
		q.bookmarks = typedBookmarkInterval
		if v := p.get(api.ParamProgress); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < minWatchProgress || d > maxWatchProgress {
				return q, fmt.Errorf("%w: %s=%q: want a duration between %v and %v",
					ErrInvalidParam, api.ParamProgress, v, minWatchProgress, maxWatchProgress)
			}
			q.bookmarks = d
		}
	}
	if q.cons, err = p.consistency(); err != nil {
		return q, err
	}
	return q, nil
}

// handleObjectWatch serves GET /apis/{group}/{version}/{resource}?watch=true: the
// resource's changes as typed events, each object converted to the requested version
// as a GET would show it. With resourceVersion=R the events after R (from R+1, replayed
// from history when R is in the past; 410 when R+1 is compacted); without it (or 0) the
// objects that exist now as ADDED events, then the changes after them. An object that
// cannot be presented in the version (stored in a version this node cannot decode,
// garbled) is an ERROR event naming it; the stream goes on. A watch the server ends
// (slow reader, snapshot installed) ends with an ERROR event whose details.revision is
// where to resume.
func (s *Server) handleObjectWatch(w http.ResponseWriter, r *http.Request, q resourceReq) error {
	tq, err := parseTypedWatch(r)
	if err != nil {
		return err
	}
	if err := q.res.ReadCheck(q.r.Key()); err != nil {
		return err
	}
	release, err := s.acquireWatch(r.Context())
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := s.requestContext(r)
	view, err := s.store.View(ctx, tq.cons)
	cancel()
	if err != nil {
		return err
	}
	prefix := []byte(q.r.Prefix)
	km, err := s.keyWatchAt(view, q, tq.fromRev)
	if err != nil {
		return err
	}
	if km != nil && km.listNew {
		prefix = []byte(km.k.To)
	}
	opts := fsm.WatchOptions{Key: prefix, End: fsm.PrefixEnd(prefix), StartRevision: tq.fromRev + 1,
		Buffer: s.cfg.WatchBuffer}
	var initial []fsm.KeyValue
	if tq.fromRev == 0 {
		opts.StartRevision = view.Revision() + 1
		if initial, _, err = view.Range(opts.Key, opts.End, 0, 0); err != nil {
			return err
		}
	}
	watcher, err := s.store.Watch(opts)
	if err != nil {
		return fmt.Errorf("watch %s: %w", q.r.Key(), err)
	}
	defer watcher.Close()

	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{}) // else ReadTimeout ends the watch's context
	w.Header().Set("Content-Type", api.ContentTypeWatch)
	w.Header().Set(api.HeaderRevision, strconv.FormatInt(view.Revision(), 10))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ws := &typedWatchStream{watchStream: &watchStream{w: w, rc: rc, bw: bufio.NewWriterSize(w, 4096),
		writeTimeout: s.cfg.WriteTimeout, revoked: s.resourceRights(r)}, q: q, s: s, km: km}
	ws.enc = json.NewEncoder(ws.bw)
	enc := q.readEncoding()
	for _, kv := range initial {
		ev := fsm.Event{Type: fsm.EventPut, KV: kv}
		if err := ws.event(&ev, typedAdded, enc); err != nil {
			return nil
		}
	}
	if err := ws.flush(); err != nil {
		return nil
	}
	s.streamWatch(r.Context(), watcher, ws, tq.bookmarks, nil)
	return nil
}

// resourceRights returns, for a typed watch made with r's token, a check that fails
// once the token is deleted (401) or no longer holds the read right on the route's
// resource (403); nil when ACLs are not enforced. The watch runs it before each write.
func (s *Server) resourceRights(r *http.Request) func() error {
	az := authzOf(r.Context())
	if az == nil {
		return nil
	}
	g, res := r.PathValue("group"), r.PathValue("resource")
	return func() error {
		cur, err := s.current(az)
		if err != nil {
			return err
		}
		if !cur.Resource(g, res, false) {
			return fmt.Errorf("%w: the token no longer has the read right on resource %s/%s", ErrForbidden, g, res)
		}
		return nil
	}
}

// rightsLost ends the watch when its token lost the right to read it (resourceRights).
func (ws *typedWatchStream) rightsLost() error { return rightsLost(ws.revoked, ws.end) }

// typedWatchStream writes typedEvent lines.
type typedWatchStream struct {
	*watchStream
	q  resourceReq
	s  *Server
	km *keyWatch // the resource's key migration; nil without one
}

var _ watchWriter = (*typedWatchStream)(nil)

// keyWatch is the key migration of a typed watch's resource. The phase at the start
// picks the range watched — the old one holds every object in phases 0–3, the new one
// in 4 and 5 (versions.KeyPlan.ListNew) — and the watch lasts while the phase reads
// that range: writes go to the old keys in every phase of 0–3 and to the new keys in
// every phase of 4–5, so nothing of the objects' history is missed in between. At the
// first revision whose phase reads the other range (the switch to 4, a rollback to
// 3), the watch ends with a 410 Expired ERROR event before any event of that revision:
// the client lists again, as after a compaction, and watches the other range from the
// list's revision. The migration's own copies and deletes are in the range not read,
// so a watcher never sees them.
type keyWatch struct {
	k       *versions.KeyMigration
	listNew bool  // the new range is watched, events are converted to the old key's form
	rev     int64 // the phase record's revision when the range was last checked
}

// keyWatchAt returns the key migration state of a typed watch of q starting after
// revision from (0: now), nil for a resource without one. A from before the last
// switch of range is 410 Expired: the events after it lie in both ranges.
func (s *Server) keyWatchAt(view *fsm.View, q resourceReq, from int64) (*keyWatch, error) {
	k := q.r.KeyMigration
	if k == nil {
		return nil, nil
	}
	rec, err := versions.ReadKeyPhaseAt(view, k.Name, 0)
	if err != nil {
		return nil, err
	}
	km := &keyWatch{k: k, listNew: versions.Plan(rec).ListNew(), rev: rec.Revision}
	if from > 0 && from < km.rev {
		then, err := versions.ReadKeyPhaseAt(view, k.Name, from)
		if err != nil {
			return nil, err
		}
		if versions.Plan(then).ListNew() != km.listNew {
			return nil, km.expired(from, km.rev)
		}
	}
	return km, nil
}

// expired is the error ending a watch whose last delivered revision is last because
// the range it reads switched at or before revision at.
func (km *keyWatch) expired(last, at int64) error {
	return &fsm.WatchError{LastRevision: last, Err: fmt.Errorf("%w: key migration %s switched the range %s is read from "+
		"(at revision %d or before): list again", fsm.ErrCompacted, km.k.Name, km.k.From, at)}
}

// cut returns how many of groups the watch may deliver: all, unless the phase reads
// the other range at one of their revisions.
func (ws *typedWatchStream) cut(groups []*fsm.RevisionEvents) (int, error) {
	km := ws.km
	view, err := ws.s.store.View(context.Background(), fsm.Serializable)
	if err != nil {
		return 0, err
	}
	rec, err := versions.ReadKeyPhase(view, km.k.Name)
	if err != nil {
		return 0, err
	}
	if rec.Revision == km.rev {
		return len(groups), nil
	}
	for i, g := range groups {
		at, err := versions.ReadKeyPhaseAt(view, km.k.Name, g.Revision)
		if err != nil {
			return i, err
		}
		if versions.Plan(at).ListNew() != km.listNew {
			return i, nil
		}
	}
	if len(groups) > 0 && rec.Revision <= groups[len(groups)-1].Revision {
		km.rev = rec.Revision // the changes so far kept the range
	}
	return len(groups), nil
}

func (ws *typedWatchStream) events(groups []*fsm.RevisionEvents) error {
	if err := ws.rightsLost(); err != nil {
		return err
	}
	n := len(groups)
	if ws.km != nil {
		var err error
		if n, err = ws.cut(groups); err != nil || n < len(groups) {
			defer func() {
				last := groups[0].Revision - 1
				if n > 0 {
					last = groups[n-1].Revision
				}
				if err == nil {
					err = ws.km.expired(last, groups[n].Revision)
				}
				ws.end(err)
			}()
		}
	}
	enc := ws.q.readEncoding()
	for _, g := range groups[:n] {
		for i := range g.Events {
			ev := &g.Events[i]
			var err error
			switch {
			case ev.Type == fsm.EventDelete:
				err = ws.event(ev, typedDeleted, enc)
			case ev.KV.CreateRevision == ev.KV.ModRevision:
				err = ws.event(ev, typedAdded, enc)
			default:
				err = ws.event(ev, typedModified, enc)
			}
			if err != nil {
				return err
			}
		}
	}
	if err := ws.flush(); err != nil {
		return err
	}
	if n < len(groups) {
		return errKeyRangeSwitched
	}
	return nil
}

// errKeyRangeSwitched stops a typed watch that keyWatch ended.
var errKeyRangeSwitched = errors.New("kv: key migration switched the watched range")

// event writes ev as a typ event: from the new range, its keys and values in the old
// key's form first. It does not flush.
func (ws *typedWatchStream) event(ev *fsm.Event, typ string, enc string) error {
	if km := ws.km; km != nil && km.listNew {
		e := *ev
		var err error
		if ev.Type == fsm.EventDelete { // the entry of a delete holds no value
			e.KV.Key = km.k.OldKey(e.KV.Key)
		} else if e.KV, err = km.toOld(e.KV); err != nil {
			return ws.errorEvent(err, string(bytes.TrimPrefix(ev.KV.Key, []byte(km.k.To))), ev.KV.ModRevision)
		}
		if e.PrevKV != nil {
			p, err := km.toOld(*e.PrevKV)
			if err != nil {
				return ws.errorEvent(err, string(bytes.TrimPrefix(ev.KV.Key, []byte(km.k.To))), ev.KV.ModRevision)
			}
			e.PrevKV = &p
		}
		ev = &e
	}
	if typ == typedDeleted {
		return ws.deleted(ev, enc)
	}
	return ws.object(typ, ev.KV, enc)
}

// toOld is kv of the new range as the object under its old key.
func (km *keyWatch) toOld(kv fsm.KeyValue) (fsm.KeyValue, error) {
	kv.Key = km.k.OldKey(kv.Key)
	v, err := km.k.ToOld(kv.Value)
	if err != nil {
		return kv, fmt.Errorf("stored object %q: %w", kv.Key, err)
	}
	kv.Value = v
	return kv, nil
}

// object writes kv as an event of type typ, or an ERROR event naming it when it
// cannot be presented in the watch's version. It does not flush.
func (ws *typedWatchStream) object(typ string, kv fsm.KeyValue, enc string) error {
	obj, err := ws.q.r.Present(kv, ws.q.version, enc)
	if err != nil {
		return ws.errorEvent(err, string(bytes.TrimPrefix(kv.Key, []byte(ws.q.r.Prefix))), kv.ModRevision)
	}
	return ws.enc.Encode(typedEvent{Type: typ, Object: obj})
}

// deleted writes a DELETED event: the object as it was before the delete, with the
// delete's revision (only its name when its last version is unknown).
func (ws *typedWatchStream) deleted(ev *fsm.Event, enc string) error {
	name := string(bytes.TrimPrefix(ev.KV.Key, []byte(ws.q.r.Prefix)))
	obj := map[string]any{"apiVersion": ws.q.apiVersion(), "metadata": map[string]any{"name": name}}
	if ev.PrevKV != nil {
		var err error
		if obj, err = ws.q.r.Present(*ev.PrevKV, ws.q.version, enc); err != nil {
			return ws.errorEvent(err, name, ev.KV.ModRevision)
		}
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["revision"] = ev.KV.ModRevision
	return ws.enc.Encode(typedEvent{Type: typedDeleted, Object: obj})
}

// errorEvent writes an ERROR event for the object name at rev. It does not flush.
func (ws *typedWatchStream) errorEvent(err error, name string, rev int64) error {
	e := errorBody(err, false)
	return ws.enc.Encode(typedEvent{Type: typedError, Object: typedStatus{Kind: "Status", Status: "Failure",
		Code: e.Code, Reason: e.Reason, Message: e.Message,
		Details: typedStatusOf{Group: ws.q.r.Group, Kind: ws.q.r.Name, Name: name, Revision: rev}}})
}

func (ws *typedWatchStream) progress(rev int64) error {
	if err := ws.rightsLost(); err != nil {
		return err
	}
	if ws.km != nil { // an idle watch learns of a switch of range at its next bookmark
		if n, err := ws.cut([]*fsm.RevisionEvents{{Revision: rev}}); err != nil || n == 0 {
			if err == nil {
				err = ws.km.expired(rev, rev)
			}
			ws.end(err)
			return errKeyRangeSwitched
		}
	}
	return ws.line(typedEvent{Type: typedBookmark, Object: map[string]any{
		"apiVersion": ws.q.apiVersion(), "metadata": map[string]any{"revision": rev}}})
}

func (ws *typedWatchStream) line(ev typedEvent) error {
	if err := ws.enc.Encode(&ev); err != nil {
		return err
	}
	return ws.flush()
}

// end writes the ERROR event of a watch the server ended: 410 Expired when the
// start was compacted (list again), otherwise resume from details.revision.
func (ws *typedWatchStream) end(err error) {
	l := endLine(err)
	code := http.StatusInternalServerError
	switch l.Reason {
	case api.ReasonResourceExpired:
		code = http.StatusGone
	case api.ReasonSlowWatcher:
		code = http.StatusTooManyRequests
	case api.ReasonRestored:
		code = http.StatusServiceUnavailable
	case api.ReasonUnauthorized:
		code = http.StatusUnauthorized
	case api.ReasonForbidden:
		code = http.StatusForbidden
	}
	var werr *fsm.WatchError
	rev := int64(0)
	if errors.As(err, &werr) {
		rev = werr.LastRevision
	}
	ws.line(typedEvent{Type: typedError, Object: typedStatus{Kind: "Status", Status: "Failure",
		Code: code, Reason: l.Reason, Message: l.Message,
		Details: typedStatusOf{Group: ws.q.r.Group, Kind: ws.q.r.Name, Revision: rev}}})
}
