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
// The order is etcd's (server/etcdserver/txn/txn.go Txn): every compare of the outer
// transaction and of the nested ones on the chosen path is evaluated first, against the
// state before the transaction (compareToPath); then every op on that path is checked
// (checkTxn: read revisions, leases, ignore_value/ignore_lease keys), and the first
// failure fails the whole transaction with nothing written; only then do the ops run,
// in order, each seeing the writes of the ops before it.
//
// A branch that writes one key twice (see CheckDuplicateKeys) is applied, op by op: the
// API refuses such transactions before proposing them, but the log may hold ones
// written by an older release, and replicas must agree on every entry.
func (s *Store) txnLocked(t *Txn) *Result {
	if err := validateTxn(t); err != nil {
		return &Result{Revision: s.cur.revision, Err: err}
	}
	plan := s.planLocked(t)
	if err := s.checkPlanLocked(t, plan); err != nil {
		return &Result{Revision: s.cur.revision, Err: err}
	}
	x := &txnRun{rev: s.cur.revision + 1}
	resps := s.runLocked(t, plan, x)
	if x.wrote {
		s.cur.revision = x.rev
	}
	s.eventsLocked(x.rev, x.wrote)
	return &Result{Revision: s.cur.revision, Succeeded: plan.ok, Responses: resps}
}

// txnPlan is the outcome of a transaction's compares (etcd's txnPath, as a tree): ok
// picks the branch, nested holds the plan of each OpTxn of that branch, in order.
type txnPlan struct {
	ok     bool
	nested []*txnPlan
}

// txnRun is the state of one running (outer) transaction.
type txnRun struct {
	rev   int64 // the revision its writes get
	wrote bool  // some op wrote
}

// branch returns the ops that run when the compares came out ok.
func (t *Txn) branch(ok bool) []Op {
	if ok {
		return t.Success
	}
	return t.Failure
}

// planLocked evaluates the compares of t and of the nested transactions on its path.
func (s *Store) planLocked(t *Txn) *txnPlan {
	p := &txnPlan{ok: true}
	for _, c := range t.Compares {
		if !s.compareLocked(c) {
			p.ok = false
			break
		}
	}
	for _, op := range t.branch(p.ok) {
		if op.Type == OpTxn {
			p.nested = append(p.nested, s.planLocked(op.Txn))
		}
	}
	return p
}

// checkPlanLocked fails the transaction, before anything is written, for the first op
// on the path (in etcd's order) that cannot run.
func (s *Store) checkPlanLocked(t *Txn, p *txnPlan) error {
	n := 0
	for i, op := range t.branch(p.ok) {
		switch op.Type {
		case OpGet:
			if err := s.checkReadRevLocked(op.Range.Revision); err != nil {
				return fmt.Errorf("%w: op %d reads revision %d (revision %d, compacted up to %d)",
					err, i, op.Range.Revision, s.cur.revision, s.cur.compactRev)
			}
		case OpPut:
			if op.Lease != 0 {
				if _, ok := s.cur.ls.get(op.Lease); !ok {
					return fmt.Errorf("%w: op %d: lease %d", ErrLeaseNotFound, i, op.Lease)
				}
			}
			if op.IgnoreValue || op.IgnoreLease {
				if _, live := s.liveLocked(op.Key); !live {
					return fmt.Errorf("%w: op %d: put %q with ignore_value or ignore_lease", ErrKeyNotFound, i, op.Key)
				}
			}
		case OpTxn:
			if err := s.checkPlanLocked(op.Txn, p.nested[n]); err != nil {
				return err
			}
			n++
		}
	}
	return nil
}

// checkReadRevLocked is etcd's checkRange for a read inside a transaction. etcd's
// compacted bound is -1 before the first compaction, so -1 then reads the latest.
func (s *Store) checkReadRevLocked(rev int64) error {
	switch {
	case rev == 0:
		return nil
	case rev > s.cur.revision:
		return ErrFutureRevision
	case rev < 0 && (rev < -1 || s.cur.compactRev > 0):
		return ErrCompacted
	case rev > 0 && rev < s.cur.compactRev:
		return ErrCompacted
	}
	return nil
}

// runLocked runs the chosen branch of t.
func (s *Store) runLocked(t *Txn, p *txnPlan, x *txnRun) []OpResponse {
	ops := t.branch(p.ok)
	resps := make([]OpResponse, 0, len(ops))
	n := 0
	for _, op := range ops {
		if op.Type == OpTxn {
			np := p.nested[n]
			n++
			resps = append(resps, OpResponse{Type: OpTxn, Txn: &Result{Succeeded: np.ok, Responses: s.runLocked(op.Txn, np, x)}})
			continue
		}
		resps = append(resps, s.runOpLocked(op, x))
	}
	return resps
}

// runOpLocked runs one op that is not a nested transaction.
func (s *Store) runOpLocked(op Op, x *txnRun) OpResponse {
	r := OpResponse{Type: op.Type}
	switch op.Type {
	case OpPut:
		prev, live := s.liveLocked(op.Key)
		if live {
			r.PrevKV = &prev
		}
		value, enc, lease := op.Value, op.Encoding, op.Lease
		// The key existed before the transaction (checkPlanLocked). If an earlier op of
		// this one deleted it (etcd's duplicate-key check lets a delete_range to the end
		// of the keyspace through; etcd then panics), the put writes an empty value.
		if op.IgnoreValue {
			value, enc = prev.Value, prev.Encoding
		}
		if op.IgnoreLease {
			lease = prev.Lease
		}
		s.writeLocked(op.Key, value, enc, lease, x.rev, false)
		x.wrote = true
	case OpDelete:
		if prev, live := s.liveLocked(op.Key); live {
			r.PrevKV = &prev
			if op.PrevKV {
				r.PrevKVs = []KeyValue{prev}
			}
			r.Deleted = 1
			s.writeLocked(op.Key, nil, "", 0, x.rev, true)
			x.wrote = true
		}
	case OpDeleteRange:
		var keys [][]byte
		s.ascend(op.Key, op.End, func(e *entry) bool {
			if e.hist != nil && !e.hist.tombstone() {
				keys = append(keys, e.key)
				if op.PrevKV {
					r.PrevKVs = append(r.PrevKVs, e.hist.keyValue(e.key))
				}
			}
			return true
		})
		for _, k := range keys {
			s.writeLocked(k, nil, "", 0, x.rev, true)
		}
		r.Deleted = int64(len(keys))
		x.wrote = x.wrote || len(keys) > 0
	case OpGet:
		rev := x.rev // everything in the tree: the latest state, this transaction's writes included
		if op.Range.Revision > 0 {
			rev = op.Range.Revision
		}
		rr := rangeTree(s.cur.tree, op.Key, op.End, rev, op.Limit, op.Range)
		r.KVs, r.More, r.Count = rr.KVs, rr.More, rr.Count
	}
	return r
}

// validateTxn rejects a malformed transaction before anything runs, so a transaction is
// all or nothing.
func validateTxn(t *Txn) error { return validateTxnBudget(t, MaxTxnOps) }

// validateTxnBudget validates t, whose longest list may hold budget entries; its nested
// transactions get what it leaves (etcd v3rpc checkTxnRequest).
func validateTxnBudget(t *Txn, budget int) error {
	if t == nil {
		return fmt.Errorf("%w: transaction missing", ErrInvalidCommand)
	}
	if n := max(len(t.Compares), len(t.Success), len(t.Failure)); n > budget {
		return fmt.Errorf("%w: %d compares, %d success ops, %d failure ops; at most %d each",
			ErrTooManyOps, len(t.Compares), len(t.Success), len(t.Failure), budget)
	}
	for i, c := range t.Compares {
		if err := validateCompare(c); err != nil {
			return fmt.Errorf("%w: compare %d: %v", ErrInvalidCommand, i, err)
		}
	}
	left := budget - max(len(t.Compares), len(t.Success), len(t.Failure))
	for _, list := range [][]Op{t.Success, t.Failure} {
		for i, op := range list {
			if err := validateOp(op); err != nil {
				return fmt.Errorf("%w: op %d: %v", ErrInvalidCommand, i, err)
			}
			if op.Type == OpTxn {
				if err := validateTxnBudget(op.Txn, left); err != nil {
					return fmt.Errorf("op %d, nested: %w", i, err)
				}
			}
		}
	}
	return nil
}

func validateCompare(c Compare) error {
	switch {
	case len(c.Key) == 0:
		return fmt.Errorf("empty key")
	case c.Target < TargetValue || c.Target > TargetLease:
		return fmt.Errorf("unknown target %d", c.Target)
	case c.Result < CompareEqual || c.Result > CompareGreater:
		return fmt.Errorf("unknown result %d", c.Result)
	case c.Target == TargetExists && c.Result != CompareEqual && c.Result != CompareNotEqual:
		return fmt.Errorf("exists takes only equal or not_equal")
	}
	return nil
}

func validateOp(op Op) error {
	if err := validateOpFields(op); err != nil {
		return err
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
	case OpTxn:
		if op.Txn == nil || op.Key != nil || op.End != nil || op.Value != nil || op.Limit != 0 {
			return fmt.Errorf("a txn op holds a nested transaction and nothing else")
		}
	default:
		return fmt.Errorf("unknown op type %d", op.Type)
	}
	return nil
}

// validateOpFields checks that op carries only fields its type takes.
func validateOpFields(op Op) error {
	if op.Encoding != "" && op.Type != OpPut {
		return fmt.Errorf("encoding tag on a non-put op")
	}
	if op.Lease != 0 && (op.Type != OpPut || op.Lease < 0) {
		return fmt.Errorf("lease %d on a %s op", op.Lease, map[bool]string{true: "put", false: "non-put"}[op.Type == OpPut])
	}
	if len(op.Encoding) > MaxEncodingLen || !utf8.ValidString(op.Encoding) {
		return fmt.Errorf("encoding tag is not UTF-8 of at most %d bytes", MaxEncodingLen)
	}
	switch {
	case op.PrevKV && op.Type != OpDelete && op.Type != OpDeleteRange:
		return fmt.Errorf("prev_kv on an op that is not a delete")
	case (op.IgnoreValue || op.IgnoreLease) && op.Type != OpPut:
		return fmt.Errorf("ignore_value or ignore_lease on a non-put op")
	case op.IgnoreValue && (len(op.Value) > 0 || op.Encoding != ""):
		return fmt.Errorf("ignore_value with a value or an encoding tag")
	case op.IgnoreLease && op.Lease != 0:
		return fmt.Errorf("ignore_lease with a lease")
	case op.Range != (RangeOptions{}) && op.Type != OpGet:
		return fmt.Errorf("range options on a non-get op")
	case op.Txn != nil && op.Type != OpTxn:
		return fmt.Errorf("nested transaction on a %d op", op.Type)
	}
	return op.Range.validate()
}

// compareLocked evaluates one guard as etcd's applyCompare: every key of a range must
// satisfy it; a range without keys compares as an absent key; a value comparison
// against no key is false whatever the relation. It reads at s.cur.revision, the state
// before the running transaction's writes (they get revision+1), as etcd reads its
// compares from the view the transaction started from.
func (s *Store) compareLocked(c Compare) bool {
	found, holds := false, true
	visitLive(s.cur.tree, c.Key, c.End, s.cur.revision, func(e *entry, v *version) bool {
		found = true
		holds = compareKV(c, v.keyValue(e.key), true)
		return holds
	})
	if !found {
		return c.Target != TargetValue && compareKV(c, KeyValue{}, false)
	}
	return holds
}

// compareKV is etcd's compareKV (plus keel's TargetExists) for one key.
func compareKV(c Compare, kv KeyValue, live bool) bool {
	var cmp int
	switch c.Target {
	case TargetValue:
		cmp = bytes.Compare(kv.Value, c.Value)
	case TargetVersion:
		cmp = cmpInt(kv.Version, c.Int)
	case TargetModRevision:
		cmp = cmpInt(kv.ModRevision, c.Int)
	case TargetCreateRevision:
		cmp = cmpInt(kv.CreateRevision, c.Int)
	case TargetLease:
		cmp = cmpInt(kv.Lease, c.Int)
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
