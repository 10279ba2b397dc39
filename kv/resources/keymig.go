package resources

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// The typed API of a resource with a key migration (versions.KeyMigration) follows the
// migration's phase record on every request: it reads the record from the same view
// as the object, and each write or delete is ONE transaction that compares the record's
// mod revision, compares the key the phase reads from, and writes (or deletes) every
// key the phase writes. A phase switch between the read and the commit fails the
// compare and the handler starts again under the new phase, so a reader never sees a
// phase switch halfway through a write.

// errPhaseChanged: the key migration's phase record changed between a request's read
// and its write; the request is retried under the new phase.
var errPhaseChanged = errors.New("resources: key migration phase changed during the write")

// keyState is the key migration state of one typed request, from one view.
type keyState struct {
	k    *versions.KeyMigration // nil: the resource has no key migration
	rec  *api.KeyPhaseRecord
	plan versions.KeyPlan
}

// keyStateAt reads the phase of q's key migration at rev (0: the view's latest).
func keyStateAt(view *fsm.View, q request, rev int64) (keyState, error) {
	ks := keyState{k: q.r.KeyMigration, plan: versions.KeyPlan{WriteOld: true}}
	if ks.k == nil {
		return ks, nil
	}
	rec, err := versions.ReadKeyPhaseAt(view, ks.k.Name, rev)
	if err != nil {
		return ks, err
	}
	ks.rec, ks.plan = rec, versions.Plan(rec)
	return ks, nil
}

// located is q's object as the phase reads it.
type located struct {
	cur   fsm.KeyValue // what the phase reads, its value in the old key's form; ModRevision 0 when absent
	found bool
	// old and nw are the two keys' entries (ModRevision 0 when absent or not read).
	old, nw fsm.KeyValue
	fromNew bool // cur came from the new key
}

// locate reads q's object from view as ks's phase reads it (at rev; 0 = latest).
func (ks keyState) locate(view *fsm.View, q request, rev int64) (located, error) {
	var l located
	get := func(key []byte) (fsm.KeyValue, bool, error) {
		item, err := view.Get(key, rev)
		if errors.Is(err, fsm.ErrKeyNotFound) {
			return fsm.KeyValue{}, false, nil
		}
		return item, err == nil, err
	}
	var err error
	var okOld, okNew bool
	if ks.k == nil || !ks.plan.ReadNew || ks.plan.Fallback {
		if l.old, okOld, err = get(q.key()); err != nil {
			return l, err
		}
	}
	if ks.k != nil && ks.plan.ReadNew {
		if l.nw, okNew, err = get(ks.k.NewKey(q.key())); err != nil {
			return l, err
		}
	}
	switch {
	case okNew:
		l.cur, l.found, l.fromNew = l.nw, true, true
		value, err := ks.k.ToOld(l.nw.Value)
		if err != nil {
			return l, fmt.Errorf("stored object %q: %w", l.nw.Key, err)
		}
		l.cur.Value, l.cur.Key = value, q.key()
	case okOld && (!ks.plan.ReadNew || ks.plan.Fallback):
		l.cur, l.found = l.old, true
	}
	return l, nil
}

// matches reports whether a client's metadata.revision rev names the object l holds:
// its revision as read, or, in phases 2 and 3, the old key's revision when the new key
// was only copied from it since (a copy never changes what the object is).
func (ks keyState) matches(l located, rev int64) bool {
	if rev == l.cur.ModRevision {
		return true
	}
	return l.fromNew && ks.plan.Fallback && l.old.ModRevision == rev && rev > 0 && l.old.ModRevision < l.nw.ModRevision
}

// guard adds to txn the compares that make it hold only under ks's phase and only if
// the object is still what l read: the phase record's mod revision, and the mod
// revision of every key the read looked at.
func (ks keyState) guard(txn *fsm.Txn, q request, l located) {
	if ks.k == nil {
		guardModRevision(txn, q.key(), l.cur.ModRevision)
		return
	}
	cmp := func(key []byte, rev int64) {
		txn.Compares = append(txn.Compares, fsm.Compare{Key: key, Target: fsm.TargetModRevision,
			Result: fsm.CompareEqual, Int: rev})
	}
	cmp([]byte(versions.KeyPhaseKey(ks.k.Name)), ks.rec.Revision)
	if !ks.plan.ReadNew || ks.plan.Fallback {
		cmp(q.key(), l.old.ModRevision)
	}
	if ks.plan.ReadNew {
		cmp(ks.k.NewKey(q.key()), l.nw.ModRevision)
	}
}

// writeOps are the ops of a put of value (in the old key's form) under ks's phase, and
// the key the phase reads back from (the last op is a get of it).
func (ks keyState) writeOps(q request, value []byte, tag string) ([]fsm.Op, error) {
	var ops []fsm.Op
	if ks.plan.WriteOld {
		ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: q.key(), Value: value, Encoding: tag})
	}
	readKey := q.key()
	if ks.k != nil && ks.plan.WriteNew {
		nv, err := ks.k.ToNew(value)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", kv.ErrInvalidBody, err)
		}
		ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: ks.k.NewKey(q.key()), Value: nv, Encoding: tag})
	}
	if ks.k != nil && ks.plan.ReadNew {
		readKey = ks.k.NewKey(q.key())
	}
	return append(ops, fsm.Op{Type: fsm.OpGet, Key: readKey}), nil
}

// deleteOps are the deletes of q's object under ks's phase.
func (ks keyState) deleteOps(q request) []fsm.Op {
	var ops []fsm.Op
	if ks.plan.WriteOld {
		ops = append(ops, fsm.Op{Type: fsm.OpDelete, Key: q.key()})
	}
	if ks.k != nil && ks.plan.WriteNew {
		ops = append(ops, fsm.Op{Type: fsm.OpDelete, Key: ks.k.NewKey(q.key())})
	}
	return ops
}

// readBack turns the stored entry a write's last op read back into the old key's form.
func (ks keyState) readBack(q request, item fsm.KeyValue) (fsm.KeyValue, error) {
	if ks.k == nil || !ks.plan.ReadNew {
		return item, nil
	}
	value, err := ks.k.ToOld(item.Value)
	if err != nil {
		return item, err
	}
	item.Value, item.Key = value, q.key()
	return item, nil
}

// phaseMoved tells a failed transaction's cause: errPhaseChanged when the phase record
// is no longer the one ks read, nil otherwise (the object changed).
func (l *Layer) phaseMoved(ctx context.Context, c kv.Caller, q request, ks keyState) error {
	if ks.k == nil {
		return nil
	}
	view, err := l.view(ctx, c, q, fsm.Linearizable, 0)
	if err != nil {
		return err
	}
	now, err := keyStateAt(view, q, 0)
	if err != nil {
		return err
	}
	if now.rec.Revision != ks.rec.Revision {
		return errPhaseChanged
	}
	return nil
}

// deleteObject deletes q's object under the phase of the view it reads (rev > 0: only
// if that is the object's revision). It returns the transaction's revision.
func (l *Layer) deleteObject(ctx context.Context, c kv.Caller, q request, rev int64) (int64, error) {
	view, err := l.view(ctx, c, q, fsm.Linearizable, 0)
	if err != nil {
		return 0, err
	}
	ks, err := keyStateAt(view, q, 0)
	if err != nil {
		return 0, err
	}
	loc, err := ks.locate(view, q, 0)
	if err != nil {
		return 0, err
	}
	if !loc.found {
		return 0, fmt.Errorf("%s %q: %w", q.r.Key(), q.name, fsm.ErrKeyNotFound)
	}
	if rev > 0 && !ks.matches(loc, rev) {
		return 0, fmt.Errorf("%w: %s %q: revision %d is not the object's current revision",
			kv.ErrConflict, q.r.Key(), q.name, rev)
	}
	txn := &fsm.Txn{Success: ks.deleteOps(q)}
	ks.guard(txn, q, loc)
	txn.Failure = nil
	res, err := l.txn(ctx, c, q, txn)
	if err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", q.r.Key(), q.name, err)
	}
	if !res.Succeeded {
		if err := l.phaseMoved(ctx, c, q, ks); err != nil {
			return 0, err
		}
		return 0, errObjectChanged
	}
	return res.Revision, nil
}

// listRange is the key range a typed list scans under the phase, and whether it reads
// from the new range; a continue token names its own range (the phase of its revision).
func (l *Layer) listRange(ctx context.Context, c kv.Caller, q request, token string) (prefix []byte, isNew bool, err error) {
	k := q.r.KeyMigration
	if k == nil {
		return []byte(q.r.Prefix), false, nil
	}
	if token != "" {
		start, err := l.core.ContinueStart(ctx, token)
		if err != nil {
			return nil, false, err
		}
		isNew = bytes.Equal(start, []byte(k.To))
	} else {
		view, err := l.view(ctx, c, q, fsm.Serializable, 0)
		if err != nil {
			return nil, false, err
		}
		ks, err := keyStateAt(view, q, 0)
		if err != nil {
			return nil, false, err
		}
		isNew = ks.plan.ListNew()
	}
	if isNew {
		return []byte(k.To), true, nil
	}
	return []byte(q.r.Prefix), false, nil
}

// overlay turns a page of a typed list into the objects the phase of its revision rev
// reads: from the new range, each converted to the old key's form; from the old range
// in phases 2 and 3, each replaced by its new key when that exists at rev.
func (l *Layer) overlay(ctx context.Context, c kv.Caller, q request, kvs []fsm.KeyValue, rev int64, isNew bool) ([]fsm.KeyValue, error) {
	k := q.r.KeyMigration
	if k == nil || len(kvs) == 0 {
		return kvs, nil
	}
	view, err := l.view(ctx, c, q, fsm.Linearizable, rev)
	if err != nil {
		return nil, err
	}
	ks, err := keyStateAt(view, q, rev)
	if err != nil {
		return nil, err
	}
	out := make([]fsm.KeyValue, 0, len(kvs))
	for _, item := range kvs {
		switch {
		case isNew:
			item.Key = k.OldKey(item.Key)
		case ks.plan.ReadNew && ks.plan.Fallback:
			nkv, err := view.Get(k.NewKey(item.Key), rev)
			if errors.Is(err, fsm.ErrKeyNotFound) {
				out = append(out, item)
				continue
			}
			if err != nil {
				return nil, err
			}
			item = nkv
			item.Key = k.OldKey(item.Key)
		default:
			out = append(out, item)
			continue
		}
		value, err := k.ToOld(item.Value)
		if err != nil {
			return nil, fmt.Errorf("stored object %q: %w", item.Key, err)
		}
		item.Value = value
		out = append(out, item)
	}
	return out, nil
}

// txn applies txn to q's resource for c: the core checks the write right and that
// every key written is the resource's (its prefix, or its key migration's new one).
func (l *Layer) txn(ctx context.Context, c kv.Caller, q request, txn *fsm.Txn) (*fsm.Result, error) {
	return l.core.ResourceTxn(ctx, c, q.r.Group, q.r.Name, txn)
}

// guardModRevision makes txn hold only while key's mod revision is rev (0: absent).
func guardModRevision(txn *fsm.Txn, key []byte, rev int64) {
	txn.Compares = []fsm.Compare{{Key: key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: rev}}
	txn.Failure = []fsm.Op{{Type: fsm.OpGet, Key: key}}
}
