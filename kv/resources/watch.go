package resources

import (
	"bytes"
	"context"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/versions"
)

// Watch opens a typed watch of ref's resource: its changes as typed events, each
// object presented in ref's version as a Get would show it. With
// opts.ResourceVersion R the events after R (from R+1, replayed from history when R
// is in the past; fsm.ErrCompacted once R+1 is compacted); without it (0) the objects
// that exist now as ADDED events (Initial), then the changes after them. An object
// that cannot be presented is an ERROR event naming it; the watch goes on.
func (l *Layer) Watch(ctx context.Context, c kv.Caller, ref kv.ObjectRef, opts kv.ObjectWatchOptions) (kv.ObjectWatch, error) {
	q, err := l.authorize(c, ref, false, false)
	if err != nil {
		return nil, err
	}
	if err := q.res.ReadCheck(q.r.Key()); err != nil {
		return nil, err
	}
	view, err := l.view(ctx, c, q, opts.Consistency, 0)
	if err != nil {
		return nil, err
	}
	km, err := keyWatchAt(view, q, opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	prefix := []byte(q.r.Prefix)
	if km != nil && km.listNew {
		prefix = []byte(km.k.To)
	}
	wo := fsm.WatchOptions{Key: prefix, End: fsm.PrefixEnd(prefix), StartRevision: opts.ResourceVersion + 1}
	if opts.ResourceVersion == 0 {
		wo.StartRevision = view.Revision() + 1
	}
	w := &objectWatch{l: l, c: c, q: q, km: km, rev: view.Revision()}
	// The watch slot first: a node at its bound refuses before reading the objects.
	if w.watcher, w.close, err = l.core.ResourceWatch(ctx, c, q.r.Group, q.r.Name, wo); err != nil {
		return nil, err
	}
	if opts.ResourceVersion == 0 {
		if w.initial, _, err = view.Range(wo.Key, wo.End, 0, 0); err != nil {
			w.close()
			return nil, err
		}
	}
	w.lost = l.core.ResourceRightsLost(c, q.r.Group, q.r.Name)
	return w, nil
}

// objectWatch is the layer's kv.ObjectWatch.
type objectWatch struct {
	l       *Layer
	c       kv.Caller
	q       request
	km      *keyWatch // the resource's key migration; nil without one
	rev     int64
	initial []fsm.KeyValue
	watcher *fsm.Watcher
	close   func()
	lost    func() error // nil: rights not checked
}

var _ kv.ObjectWatch = (*objectWatch)(nil)

func (w *objectWatch) Watcher() *fsm.Watcher { return w.watcher }
func (w *objectWatch) Revision() int64       { return w.rev }
func (w *objectWatch) Group() string         { return w.q.r.Group }
func (w *objectWatch) Kind() string          { return w.q.r.Name }
func (w *objectWatch) Close()                { w.close() }

func (w *objectWatch) RightsLost() error {
	if w.lost == nil {
		return nil
	}
	return w.lost()
}

func (w *objectWatch) Initial() []kv.ObjectEvent {
	enc := w.q.readEncoding()
	out := make([]kv.ObjectEvent, 0, len(w.initial))
	for _, item := range w.initial {
		out = append(out, w.event(&fsm.Event{Type: fsm.EventPut, KV: item}, kv.ObjectAdded, enc))
	}
	w.initial = nil
	return out
}

func (w *objectWatch) Events(groups []*fsm.RevisionEvents) ([]kv.ObjectEvent, error) {
	n := len(groups)
	var end error
	if w.km != nil {
		var err error
		if n, err = w.km.cut(w.l, w.c, groups); err != nil || n < len(groups) {
			last := groups[0].Revision - 1
			if n > 0 {
				last = groups[n-1].Revision
			}
			end = err
			if end == nil {
				end = w.km.expired(last, groups[n].Revision)
			}
		}
	}
	enc := w.q.readEncoding()
	var out []kv.ObjectEvent
	for _, g := range groups[:n] {
		for i := range g.Events {
			ev := &g.Events[i]
			switch {
			case ev.Type == fsm.EventDelete:
				out = append(out, w.event(ev, kv.ObjectDeleted, enc))
			case ev.KV.CreateRevision == ev.KV.ModRevision:
				out = append(out, w.event(ev, kv.ObjectAdded, enc))
			default:
				out = append(out, w.event(ev, kv.ObjectModified, enc))
			}
		}
	}
	return out, end
}

func (w *objectWatch) Bookmark(rev int64) (kv.ObjectEvent, error) {
	if w.km != nil { // an idle watch learns of a switch of range at its next bookmark
		if n, err := w.km.cut(w.l, w.c, []*fsm.RevisionEvents{{Revision: rev}}); err != nil || n == 0 {
			if err == nil {
				err = w.km.expired(rev, rev)
			}
			return kv.ObjectEvent{}, err
		}
	}
	return kv.ObjectEvent{Type: kv.ObjectBookmark, Object: map[string]any{
		"apiVersion": w.q.apiVersion(), "metadata": map[string]any{"revision": rev}}}, nil
}

// event is ev as a typ event: from the new range, its keys and values in the old
// key's form first; an ERROR event naming the object when it cannot be presented.
func (w *objectWatch) event(ev *fsm.Event, typ string, enc string) kv.ObjectEvent {
	if km := w.km; km != nil && km.listNew {
		e := *ev
		name := string(bytes.TrimPrefix(ev.KV.Key, []byte(km.k.To)))
		var err error
		if ev.Type == fsm.EventDelete { // the entry of a delete holds no value
			e.KV.Key = km.k.OldKey(e.KV.Key)
		} else if e.KV, err = km.toOld(e.KV); err != nil {
			return failed(err, name, ev.KV.ModRevision)
		}
		if e.PrevKV != nil {
			p, err := km.toOld(*e.PrevKV)
			if err != nil {
				return failed(err, name, ev.KV.ModRevision)
			}
			e.PrevKV = &p
		}
		ev = &e
	}
	if typ == kv.ObjectDeleted {
		return w.deleted(ev, enc)
	}
	obj, err := w.q.r.Present(ev.KV, w.q.version, enc)
	if err != nil {
		return failed(err, string(bytes.TrimPrefix(ev.KV.Key, []byte(w.q.r.Prefix))), ev.KV.ModRevision)
	}
	return kv.ObjectEvent{Type: typ, Object: obj}
}

// deleted is a DELETED event: the object as it was before the delete, with the
// delete's revision (only its name when its last version is unknown).
func (w *objectWatch) deleted(ev *fsm.Event, enc string) kv.ObjectEvent {
	name := string(bytes.TrimPrefix(ev.KV.Key, []byte(w.q.r.Prefix)))
	obj := map[string]any{"apiVersion": w.q.apiVersion(), "metadata": map[string]any{"name": name}}
	if ev.PrevKV != nil {
		var err error
		if obj, err = w.q.r.Present(*ev.PrevKV, w.q.version, enc); err != nil {
			return failed(err, name, ev.KV.ModRevision)
		}
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["revision"] = ev.KV.ModRevision
	return kv.ObjectEvent{Type: kv.ObjectDeleted, Object: obj}
}

// failed is the ERROR event of the object name at rev.
func failed(err error, name string, rev int64) kv.ObjectEvent {
	return kv.ObjectEvent{Type: kv.ObjectFailed, Failed: &kv.ObjectError{Name: name, Revision: rev, Err: err}}
}

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
	q       request
	listNew bool  // the new range is watched, events are converted to the old key's form
	rev     int64 // the phase record's revision when the range was last checked
}

// keyWatchAt returns the key migration state of a typed watch of q starting after
// revision from (0: now), nil for a resource without one. A from before the last
// switch of range is 410 Expired: the events after it lie in both ranges.
func keyWatchAt(view *fsm.View, q request, from int64) (*keyWatch, error) {
	k := q.r.KeyMigration
	if k == nil {
		return nil, nil
	}
	ks, err := keyStateAt(view, q, 0)
	if err != nil {
		return nil, err
	}
	km := &keyWatch{k: k, q: q, listNew: ks.plan.ListNew(), rev: ks.rec.Revision}
	if from > 0 && from < km.rev {
		then, err := keyStateAt(view, q, from)
		if err != nil {
			return nil, err
		}
		if then.plan.ListNew() != km.listNew {
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
func (km *keyWatch) cut(l *Layer, c kv.Caller, groups []*fsm.RevisionEvents) (int, error) {
	view, err := l.core.ResourceView(context.Background(), c, km.q.r.Group, km.q.r.Name, fsm.Serializable, 0)
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

// toOld is kv of the new range as the object under its old key.
func (km *keyWatch) toOld(item fsm.KeyValue) (fsm.KeyValue, error) {
	item.Key = km.k.OldKey(item.Key)
	v, err := km.k.ToOld(item.Value)
	if err != nil {
		return item, fmt.Errorf("stored object %q: %w", item.Key, err)
	}
	item.Value = v
	return item, nil
}
