package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/jsonutf8"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/versions"
)

// Put creates or replaces ref's object from body (JSON, in ref's version). A
// metadata.revision > 0 makes it a compare-and-swap (kv.ErrConflict when the object
// changed since). The object is prepared by versions.Resource.PrepareWrite: defaulted,
// refused (kv.ErrInvalidBody, naming the field) unless it reads in every served
// version, converted to this node's storage (encoding) version, with the fields its
// version cannot see carried over from the stored object. A write that would lose
// values is kv.ErrDowngraded unless force. It returns what was stored, in ref's
// version, and whether it was created.
func (l *Layer) Put(ctx context.Context, c kv.Caller, ref kv.ObjectRef, body []byte, force bool) (map[string]any, bool, error) {
	q, err := l.authorize(c, ref, true, true)
	if err != nil {
		return nil, false, err
	}
	obj, rev, marked, err := validateObject(q, body)
	if err != nil {
		return nil, false, err
	}
	if marked && !force {
		return nil, false, fmt.Errorf("%w: %s %q: the body is marked metadata.downgraded: it was read through %s, which "+
			"cannot hold all of the stored object, and writing it back would lose the rest; "+
			"write through a version that holds it, or add ?force=true to accept the loss",
			kv.ErrDowngraded, q.r.Key(), q.name, q.apiVersion())
	}
	enc, err := q.res.WriteEncoding(q.r.Key())
	if err != nil {
		return nil, false, err
	}
	var res *putResult
	for attempt := 0; ; attempt++ {
		res, err = l.putObject(ctx, c, q, obj, rev, enc, force)
		// A blind write (no metadata.revision) raced another write between reading
		// the object it carries over from and storing, or a key migration's phase
		// moved in between: read again.
		retry := errors.Is(err, errPhaseChanged) || (errors.Is(err, errObjectChanged) && rev == 0)
		if !retry || attempt == maxPutAttempts-1 {
			break
		}
	}
	if errors.Is(err, errObjectChanged) || errors.Is(err, errPhaseChanged) {
		return nil, false, fmt.Errorf("%w: %s %q changed %d times while it was being written; try again",
			kv.ErrConflict, q.r.Key(), q.name, maxPutAttempts)
	}
	if err != nil {
		return nil, false, err
	}
	out, err := q.r.Present(res.kv, q.version, enc)
	if err != nil {
		return nil, false, err
	}
	return out, res.created, nil
}

// putResult is what a typed put stored, as the phase reads it back.
type putResult struct {
	kv      fsm.KeyValue
	created bool
}

// maxPutAttempts bounds the read-prepare-write rounds of a blind PUT under contention.
const maxPutAttempts = 5

// errObjectChanged: the stored object changed between putObject's read and its write.
var errObjectChanged = errors.New("resources: object changed during the write")

// putObject stores obj (in q.version; rev > 0: only over that mod revision) in
// encoding enc, carrying over from the object stored now. The write is guarded on the
// mod revision of the object it carried over from (absent: create only), so what it
// carried is never stale; a lost race is errObjectChanged when rev == 0 and
// kv.ErrConflict otherwise.
func (l *Layer) putObject(ctx context.Context, c kv.Caller, q request, obj map[string]any, rev int64, enc string, force bool) (*putResult, error) {
	view, err := l.view(ctx, c, q, fsm.Linearizable, 0)
	if err != nil {
		return nil, err
	}
	ks, err := keyStateAt(view, q, 0)
	if err != nil {
		return nil, err
	}
	loc, err := ks.locate(view, q, 0)
	if err != nil {
		return nil, err
	}
	stored, sv, err := storedObject(q, loc)
	if err != nil {
		return nil, err
	}
	if rev > 0 && !ks.matches(loc, rev) {
		return nil, revisionConflict(q, rev)
	}
	prep, err := q.r.PrepareWrite(obj, q.version, stored, sv, enc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", kv.ErrInvalidBody, err)
	}
	if prep.Loses() && !force {
		return nil, lossError(q, enc, prep)
	}
	value, err := json.Marshal(prep.Object)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", kv.ErrInvalidBody, err)
	}
	if err := l.core.CheckObjectSize(len(value)); err != nil {
		return nil, err
	}
	ops, err := ks.writeOps(q, value, versions.EncodingTag(q.r.Key(), enc))
	if err != nil {
		return nil, err
	}
	txn := &fsm.Txn{Success: ops}
	ks.guard(txn, q, loc)
	res, err := l.txn(ctx, c, q, txn)
	if err != nil {
		return nil, fmt.Errorf("put %s %q: %w", q.r.Key(), q.name, err)
	}
	if !res.Succeeded {
		if err := l.phaseMoved(ctx, c, q, ks); err != nil {
			return nil, err
		}
		if rev > 0 {
			return nil, revisionConflict(q, rev)
		}
		return nil, errObjectChanged
	}
	item, err := ks.readBack(q, res.Responses[len(res.Responses)-1].KVs[0])
	if err != nil {
		return nil, err
	}
	return &putResult{kv: item, created: !loc.found}, nil
}

// storedObject is the object stored now at loc, to carry over from, and its version
// (nil and "" when there is none); a garbled object is replaced, not carried over. An
// object stored in a version this node cannot decode is refused.
func storedObject(q request, loc located) (map[string]any, string, error) {
	if !loc.found {
		return nil, "", nil
	}
	sv := q.r.StoredVersion(loc.cur)
	if !q.r.HasVersion(sv) {
		return nil, "", fmt.Errorf("%w: %s %q is stored in version %s, which this node's schema cannot decode; "+
			"write it through a node that can", versions.ErrUndecodable, q.r.Key(), q.name, sv)
	}
	stored, _ := versions.DecodeObject(loc.cur.Value)
	return stored, sv, nil
}

// revisionConflict: a write guarded on rev found the object at another revision.
func revisionConflict(q request, rev int64) error {
	return fmt.Errorf("%w: %s %q: revision %d is not the object's current revision", kv.ErrConflict, q.r.Key(), q.name, rev)
}

// lossError is the 409 Downgraded of a write that would lose values.
func lossError(q request, enc string, prep *versions.Write) error {
	var why []string
	if len(prep.Lost) > 0 {
		why = append(why, fmt.Sprintf("%s/%s, the version %s is written in now, cannot hold the values of %v",
			q.r.Group, enc, q.r.Key(), prep.Lost))
	}
	if len(prep.Downgraded) > 0 {
		why = append(why, fmt.Sprintf("the stored object holds values of %v that %s cannot see and that cannot be kept",
			prep.Downgraded, q.apiVersion()))
	}
	if h, ok := q.res.(interface{ HeldBack(string) string }); ok && len(prep.Lost) > 0 {
		if held := h.HeldBack(q.r.Key()); held != "" {
			why = append(why, held) // the stored objects may be newer: say who holds writes back
		}
	}
	return fmt.Errorf("%w: %s %q: %s; nothing written (add ?force=true to accept the loss)",
		kv.ErrDowngraded, q.r.Key(), q.name, strings.Join(why, "; and "))
}

// validateObject checks a PUT body: a JSON object whose apiVersion (if set) is the
// path's, whose metadata.name (if set) is the path's name, whose metadata.revision
// (if set) is a non-negative integer and whose metadata.downgraded (if set) is a
// boolean. It returns the object without those two server-set fields, and whether it
// was marked downgraded.
func validateObject(q request, body []byte) (map[string]any, int64, bool, error) {
	obj, rev, err := validateObjectMeta(q, body)
	if err != nil {
		return nil, 0, false, err
	}
	meta := obj["metadata"].(map[string]any)
	d, ok := meta["downgraded"]
	if !ok {
		return obj, rev, false, nil
	}
	marked, isBool := d.(bool)
	if !isBool {
		return nil, 0, false, fmt.Errorf("%w: metadata.downgraded %v is not a boolean", kv.ErrInvalidBody, d)
	}
	delete(meta, "downgraded")
	return obj, rev, marked, nil
}

// validateObjectMeta is validateObject up to metadata.revision.
func validateObjectMeta(q request, body []byte) (map[string]any, int64, error) {
	if err := jsonutf8.Check(body); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", kv.ErrInvalidBody, err)
	}
	obj, err := versions.DecodeObject(body)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", kv.ErrInvalidBody, err)
	}
	if av, ok := obj["apiVersion"]; ok && av != q.apiVersion() {
		return nil, 0, fmt.Errorf("%w: apiVersion %v does not match the path's %s", kv.ErrInvalidBody, av, q.apiVersion())
	}
	obj["apiVersion"] = q.apiVersion()
	meta := map[string]any{}
	if m, ok := obj["metadata"]; ok {
		if meta, ok = m.(map[string]any); !ok {
			return nil, 0, fmt.Errorf("%w: metadata is not an object", kv.ErrInvalidBody)
		}
	}
	if n, ok := meta["name"]; ok && n != q.name {
		return nil, 0, fmt.Errorf("%w: metadata.name %v does not match the path's name %q", kv.ErrInvalidBody, n, q.name)
	}
	meta["name"] = q.name
	var rev int64
	if rv, ok := meta["revision"]; ok {
		n, isNum := rv.(json.Number)
		v, err := strconv.ParseInt(string(n), 10, 64)
		if !isNum || err != nil || v < 0 {
			return nil, 0, fmt.Errorf("%w: metadata.revision %v is not a non-negative integer", kv.ErrInvalidBody, rv)
		}
		rev = v
		delete(meta, "revision")
	}
	obj["metadata"] = meta
	return obj, rev, nil
}

// Delete deletes ref's object, as the key migration's phase writes it (rev > 0: only
// if that is the object's revision, kv.ErrConflict otherwise), and returns the
// revision of the delete; fsm.ErrKeyNotFound when it does not exist.
func (l *Layer) Delete(ctx context.Context, c kv.Caller, ref kv.ObjectRef, rev int64) (int64, error) {
	q, err := l.authorize(c, ref, true, true)
	if err != nil {
		return 0, err
	}
	if rev < 0 {
		return 0, fmt.Errorf("%w: revision=%d: want a positive integer", kv.ErrInvalidParam, rev)
	}
	if _, err := q.res.WriteEncoding(q.r.Key()); errors.Is(err, versions.ErrNotRegistered) {
		return 0, err
	}
	if q.r.KeyMigration == nil {
		return l.deletePlain(ctx, c, q, rev)
	}
	var at int64
	for attempt := 0; ; attempt++ {
		at, err = l.deleteObject(ctx, c, q, rev)
		retry := errors.Is(err, errPhaseChanged) || (errors.Is(err, errObjectChanged) && rev == 0)
		if !retry || attempt == maxPutAttempts-1 {
			break
		}
	}
	if errors.Is(err, errObjectChanged) && rev > 0 {
		return 0, fmt.Errorf("%w: %s %q: revision %d is not the object's current revision",
			kv.ErrConflict, q.r.Key(), q.name, rev)
	}
	if errors.Is(err, errObjectChanged) || errors.Is(err, errPhaseChanged) {
		return 0, fmt.Errorf("%w: %s %q changed %d times while it was being deleted; try again",
			kv.ErrConflict, q.r.Key(), q.name, maxPutAttempts)
	}
	return at, err
}

// deletePlain deletes the object of a resource without a key migration: one delete,
// guarded by the object's mod revision when rev > 0.
func (l *Layer) deletePlain(ctx context.Context, c kv.Caller, q request, rev int64) (int64, error) {
	txn := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpDelete, Key: q.key()}}}
	if rev > 0 {
		guardModRevision(txn, q.key(), rev)
	}
	res, err := l.txn(ctx, c, q, txn)
	if err != nil {
		return 0, fmt.Errorf("delete %s %q: %w", q.r.Key(), q.name, err)
	}
	if !res.Succeeded {
		return 0, fmt.Errorf("%w: %s %q: revision %d is not the object's current revision",
			kv.ErrConflict, q.r.Key(), q.name, rev)
	}
	if res.Responses[0].Deleted == 0 {
		return 0, fmt.Errorf("%s %q: %w", q.r.Key(), q.name, fsm.ErrKeyNotFound)
	}
	return res.Revision, nil
}
