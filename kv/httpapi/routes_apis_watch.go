package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// The typed watch's HTTP door: it decodes the request, opens the watch through the
// typed layer (kv.ObjectAPI.Watch, which owns conversion, key migrations and the events'
// meaning), pumps it with the KV watch's machinery (bookmarks, write deadlines, the
// server's end) and writes each event as a line.

// The types of typed watch events, as kv.ObjectAPI names them.
const (
	typedAdded    = kv.ObjectAdded
	typedModified = kv.ObjectModified
	typedDeleted  = kv.ObjectDeleted
	typedBookmark = kv.ObjectBookmark
	typedError    = kv.ObjectFailed
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
	leader    bool // require_leader: refused without leader contact, ended on losing it
}

func parseTypedWatch(r *http.Request) (typedWatchReq, error) {
	var q typedWatchReq
	p, err := parseParams(r, "watch", "resourceVersion", "allowWatchBookmarks", api.ParamProgress, api.ParamConsistency,
		api.ParamRequireLeader)
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
			d, err := kv.ParseBookmarkInterval(v)
			if err != nil {
				return q, err
			}
			q.bookmarks = d
		}
	}
	if q.cons, err = p.consistency(); err != nil {
		return q, err
	}
	if q.leader, err = parseRequireLeader(r, p); err != nil {
		return q, err
	}
	return q, nil
}

// handleObjectWatch serves GET /apis/{group}/{version}/{resource}?watch=true: the
// resource's changes as typed events (kv.ObjectAPI.Watch says which). A watch the server
// ends (slow reader, snapshot installed, a key migration's switch of range, the loss
// of leader contact under require_leader) ends with an ERROR event whose
// details.revision is where to resume.
func (s *Server) handleObjectWatch(w http.ResponseWriter, r *http.Request, o kv.ObjectAPI) error {
	tq, err := parseTypedWatch(r)
	if err != nil {
		return err
	}
	lost, err := s.leaderLost(tq.leader)
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	ow, err := o.Watch(ctx, CallerOf(r), objectRef(r), kv.ObjectWatchOptions{ResourceVersion: tq.fromRev, Consistency: tq.cons})
	cancel()
	if err != nil {
		return err
	}
	defer ow.Close()

	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{}) // else ReadTimeout ends the watch's context
	w.Header().Set("Content-Type", api.ContentTypeWatch)
	w.Header().Set(api.HeaderRevision, strconv.FormatInt(ow.Revision(), 10))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ws := &typedWatchStream{watchStream: &watchStream{w: w, rc: rc, bw: bufio.NewWriterSize(w, 4096),
		writeTimeout: s.cfg.WriteTimeout, revoked: ow.RightsLost, last: ow.Revision()}, ow: ow, group: ow.Group(), kind: ow.Kind()}
	if tq.fromRev > 0 {
		ws.last = tq.fromRev
	}
	ws.enc = json.NewEncoder(ws.bw)
	for _, ev := range ow.Initial() {
		if err := ws.write(ev); err != nil {
			return nil
		}
	}
	if err := ws.flush(); err != nil {
		return nil
	}
	s.streamWatch(r.Context(), ow.Watcher(), ws, tq.bookmarks, lost)
	return nil
}

// rightsLost ends the watch when its token lost the right to read it.
func (ws *typedWatchStream) rightsLost() error { return rightsLost(ws.revoked, ws.end) }

// typedWatchStream writes typedEvent lines.
type typedWatchStream struct {
	*watchStream
	ow          kv.ObjectWatch
	group, kind string // the resource, named in ERROR events
}

var _ watchWriter = (*typedWatchStream)(nil)

func (ws *typedWatchStream) events(groups []*fsm.RevisionEvents) error {
	if err := ws.rightsLost(); err != nil {
		return err
	}
	evs, end := ws.ow.Events(groups)
	for _, ev := range evs {
		if err := ws.write(ev); err != nil {
			return err
		}
	}
	if err := ws.flush(); err != nil {
		return err
	}
	if end != nil {
		ws.end(end)
		return errKeyRangeSwitched
	}
	if len(groups) > 0 {
		ws.last = groups[len(groups)-1].Revision
	}
	return nil
}

// errKeyRangeSwitched stops a typed watch the layer ended.
var errKeyRangeSwitched = errors.New("kv: key migration switched the watched range")

// write writes one event; an ERROR event about one object carries the status its
// error maps to. It does not flush.
func (ws *typedWatchStream) write(ev kv.ObjectEvent) error {
	if f := ev.Failed; f != nil {
		e := kv.WireError(f.Err, false)
		return ws.enc.Encode(typedEvent{Type: typedError, Object: typedStatus{Kind: "Status", Status: "Failure",
			Code: e.Code, Reason: e.Reason, Message: e.Message,
			Details: typedStatusOf{Group: ws.group, Kind: ws.kind, Name: f.Name, Revision: f.Revision}}})
	}
	return ws.enc.Encode(typedEvent{Type: ev.Type, Object: ev.Object})
}

func (ws *typedWatchStream) progress(rev int64) error {
	if err := ws.rightsLost(); err != nil {
		return err
	}
	ev, err := ws.ow.Bookmark(rev)
	if err != nil {
		ws.end(err)
		return errKeyRangeSwitched
	}
	return ws.line(typedEvent{Type: ev.Type, Object: ev.Object})
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
	l := kv.WatchEnd(err)
	code := kv.WireError(err, false).Code // the one table's, as the reason
	var werr *fsm.WatchError
	rev := int64(0)
	if errors.As(err, &werr) {
		rev = werr.LastRevision
	} else if l.Reason == api.ReasonNoLeader {
		rev = ws.last // every event up to it was sent
	}
	ws.line(typedEvent{Type: typedError, Object: typedStatus{Kind: "Status", Status: "Failure",
		Code: code, Reason: l.Reason, Message: l.Message,
		Details: typedStatusOf{Group: ws.group, Kind: ws.kind, Revision: rev}}})
}
