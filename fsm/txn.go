package fsm

import (
	"bytes"
	"fmt"
	"maps"
	"unicode/utf8"
)

// txnLocked validates t, evaluates its compares against the latest state and runs the
// chosen branch. Every write of the branch gets revision+1; the revision advances only
// if something was written.
//
// A branch that writes one key twice (see CheckDuplicateKeys) is applied, op by op: the
// API refuses such transactions before proposing them, but the log may hold ones
// written by an older release, and replicas must agree on every entry.
func (s *Store) txnLocked(t *Txn) *Result {
	if err := validateTxn(t); err != nil {
		return &Result{Revision: s.cur.revision, Err: err}
	}
	ok := true
	for _, c := range t.Compares {
		if !s.compareLocked(c) {
			ok = false
			break
		}
	}
	ops := t.Success
	if !ok {
		ops = t.Failure
	}
	if err := s.checkLeasesLocked(ops); err != nil {
		return &Result{Revision: s.cur.revision, Err: err}
	}
	rev := s.cur.revision + 1
	wrote := false
	resps := make([]OpResponse, 0, len(ops))
	for _, op := range ops {
		r := OpResponse{Type: op.Type}
		switch op.Type {
		case OpPut:
			if prev, live := s.liveLocked(op.Key); live {
				r.PrevKV = &prev
			}
			s.writeLocked(op.Key, op.Value, op.Encoding, op.Lease, rev, false)
			wrote = true
		case OpDelete:
			if prev, live := s.liveLocked(op.Key); live {
				r.PrevKV = &prev
				r.Deleted = 1
				s.writeLocked(op.Key, nil, "", 0, rev, true)
				wrote = true
			}
		case OpDeleteRange:
			var keys [][]byte
			s.ascend(op.Key, op.End, func(e *entry) bool {
				if e.hist != nil && !e.hist.tombstone() {
					keys = append(keys, e.key)
				}
				return true
			})
			for _, k := range keys {
				s.writeLocked(k, nil, "", 0, rev, true)
			}
			r.Deleted = int64(len(keys))
			wrote = wrote || len(keys) > 0
		case OpGet:
			if op.End == nil {
				if kv, live := s.liveLocked(op.Key); live {
					r.KVs = []KeyValue{kv}
				}
				break
			}
			s.ascend(op.Key, op.End, func(e *entry) bool {
				if e.hist == nil || e.hist.tombstone() {
					return true
				}
				if op.Limit > 0 && int64(len(r.KVs)) == op.Limit {
					r.More = true
					return false
				}
				r.KVs = append(r.KVs, e.hist.keyValue(e.key))
				return true
			})
		}
		resps = append(resps, r)
	}
	if wrote {
		s.cur.revision = rev
	}
	s.eventsLocked(rev, wrote)
	return &Result{Revision: s.cur.revision, Succeeded: ok, Responses: resps}
}

// validateTxn rejects a malformed transaction before anything runs, so a transaction is
// all or nothing.
func validateTxn(t *Txn) error {
	if t == nil {
		return fmt.Errorf("%w: transaction missing", ErrInvalidCommand)
	}
	if len(t.Compares) > MaxTxnOps || len(t.Success) > MaxTxnOps || len(t.Failure) > MaxTxnOps {
		return fmt.Errorf("%w: %d compares, %d success ops, %d failure ops; at most %d each",
			ErrTooManyOps, len(t.Compares), len(t.Success), len(t.Failure), MaxTxnOps)
	}
	for i, c := range t.Compares {
		if len(c.Key) == 0 {
			return fmt.Errorf("%w: compare %d: empty key", ErrInvalidCommand, i)
		}
		if c.Target < TargetValue || c.Target > TargetExists {
			return fmt.Errorf("%w: compare %d: unknown target %d", ErrInvalidCommand, i, c.Target)
		}
		if c.Result < CompareEqual || c.Result > CompareGreater {
			return fmt.Errorf("%w: compare %d: unknown result %d", ErrInvalidCommand, i, c.Result)
		}
		if c.Target == TargetExists && c.Result != CompareEqual && c.Result != CompareNotEqual {
			return fmt.Errorf("%w: compare %d: exists takes only equal or not_equal", ErrInvalidCommand, i)
		}
	}
	for _, list := range [][]Op{t.Success, t.Failure} {
		for i, op := range list {
			if err := validateOp(op); err != nil {
				return fmt.Errorf("%w: op %d: %v", ErrInvalidCommand, i, err)
			}
		}
	}
	return nil
}

func validateOp(op Op) error {
	if op.Encoding != "" && op.Type != OpPut {
		return fmt.Errorf("encoding tag on a non-put op")
	}
	if op.Lease != 0 && (op.Type != OpPut || op.Lease < 0) {
		return fmt.Errorf("lease %d on a %s op", op.Lease, map[bool]string{true: "put", false: "non-put"}[op.Type == OpPut])
	}
	if len(op.Encoding) > MaxEncodingLen || !utf8.ValidString(op.Encoding) {
		return fmt.Errorf("encoding tag is not UTF-8 of at most %d bytes", MaxEncodingLen)
	}
	switch op.Type {
	case OpPut, OpDelete:
		if len(op.Key) == 0 {
			return fmt.Errorf("empty key")
		}
	case OpDeleteRange, OpGet:
		if op.Type == OpGet && len(op.Key) == 0 && op.End == nil {
			return fmt.Errorf("empty key")
		}
		if len(op.End) > 0 && bytes.Compare(op.End, op.Key) <= 0 {
			return fmt.Errorf("range end %q is not after start %q", op.End, op.Key)
		}
		if op.Limit < 0 {
			return fmt.Errorf("negative limit")
		}
	default:
		return fmt.Errorf("unknown op type %d", op.Type)
	}
	return nil
}

// compareLocked evaluates one guard against the latest state. As in etcd, a value
// comparison against an absent key is false whatever the relation.
func (s *Store) compareLocked(c Compare) bool {
	kv, live := s.liveLocked(c.Key)
	var cmp int
	switch c.Target {
	case TargetValue:
		if !live {
			return false
		}
		cmp = bytes.Compare(kv.Value, c.Value)
	case TargetVersion:
		cmp = cmpInt(kv.Version, c.Int)
	case TargetModRevision:
		cmp = cmpInt(kv.ModRevision, c.Int)
	case TargetCreateRevision:
		cmp = cmpInt(kv.CreateRevision, c.Int)
	case TargetExists:
		exists := int64(0)
		if live {
			exists = 1
		}
		cmp = cmpInt(exists, c.Int)
	}
	switch c.Result {
	case CompareEqual:
		return cmp == 0
	case CompareNotEqual:
		return cmp != 0
	case CompareLess:
		return cmp < 0
	case CompareGreater:
		return cmp > 0
	}
	return false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// liveLocked returns the latest version of key if the key exists.
func (s *Store) liveLocked(key []byte) (KeyValue, bool) {
	e, ok := s.cur.tree.Get(&entry{key: key})
	if !ok || e.hist == nil || e.hist.tombstone() {
		return KeyValue{}, false
	}
	return e.hist.keyValue(e.key), true
}

// ascend visits the entries of [start, end) of the current tree; end nil means no bound.
func (s *Store) ascend(start, end []byte, fn func(*entry) bool) {
	ascendTree(s.cur.tree, start, end, fn)
}

// writeLocked links a new version of key at rev: a value tagged enc, or a tombstone
// when tomb is set. It keeps the per-encoding live-key counts: the live head it
// replaces stops counting, the new live version starts. Writes within one transaction
// apply in order, and one revision keeps one version per key: a later write of the same
// transaction replaces the earlier one's version (a second put of a key bumps its
// version again). etcd refuses such transactions, and so does keel's API
// (CheckDuplicateKeys); the store still applies them, for log entries that hold them.
//
// It keeps the lease attachments too: the key leaves its head's lease and joins lease
// (0 = none) unless it becomes a tombstone.
func (s *Store) writeLocked(key, value []byte, enc string, lease int64, rev int64, tomb bool) {
	s.noteWriteLocked(key)
	e, found := s.cur.tree.Get(&entry{key: key})
	var head, base *version // head: latest version; base: latest before this revision
	if found {
		key = e.key
		head, base = e.hist, e.hist
		if base != nil && base.mod == rev {
			base = base.next
		}
	} else {
		key = bytes.Clone(key)
	}
	headLive := head != nil && !head.tombstone()
	if tomb && !headLive {
		return
	}
	var oldLease int64
	if headLive {
		s.countLocked(head.encoding, -1)
		oldLease = head.lease
	}
	if !tomb {
		s.countLocked(enc, +1)
		s.attachLocked(key, oldLease, lease)
	} else {
		s.attachLocked(key, oldLease, 0)
	}
	var nv *version
	switch {
	case tomb && (base == nil || base.tombstone()):
		// The key was created by this transaction: deleting it undoes that write.
		if base == nil {
			s.cur.tree.Delete(e)
		} else {
			s.cur.tree.ReplaceOrInsert(&entry{key: key, hist: base})
		}
		return
	case tomb:
		nv = &version{mod: rev, next: base}
	case headLive:
		nv = &version{value: value, encoding: enc, lease: lease, create: head.create, mod: rev, version: head.version + 1, next: base}
	default:
		nv = &version{value: value, encoding: enc, lease: lease, create: rev, mod: rev, version: 1, next: base}
	}
	if base != nil && head == base {
		// base is superseded by rev: once rev is compacted, base can go.
		s.pending.push(rev, key)
	}
	s.cur.tree.ReplaceOrInsert(&entry{key: key, hist: nv})
}

func (v *version) keyValue(key []byte) KeyValue {
	return KeyValue{Key: key, Value: v.value, CreateRevision: v.create, ModRevision: v.mod, Version: v.version, Encoding: v.encoding, Lease: v.lease}
}

// countLocked adds delta to the live-key count of encoding tag enc ("" is not counted).
// The published map is shared with views, so the first change after a publish copies it.
func (s *Store) countLocked(enc string, delta int64) {
	if enc == "" {
		return
	}
	if !s.encOwned {
		s.cur.encodings = maps.Clone(s.cur.encodings)
		if s.cur.encodings == nil {
			s.cur.encodings = make(map[string]int64)
		}
		s.encOwned = true
	}
	if n := s.cur.encodings[enc] + delta; n > 0 {
		s.cur.encodings[enc] = n
	} else {
		delete(s.cur.encodings, enc)
	}
}
