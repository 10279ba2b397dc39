package kv

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// checkReservedWrites refuses a KV API transaction that writes keys the KV API does
// not own: keel's own records under versions.SystemPrefix (StorageVersion,
// StorageState, migrations), which the agent writes through the store directly, and
// the keys of every typed resource of this node's schema, which only the resource API
// writes (it converts, checks and tags them; a raw write would skip the
// storage-version filter and the per-version object counts). A put or delete of such
// a key, and a delete of any range that overlaps such a prefix (deleting everything
// under "/registry/" included), is ErrReservedPrefix, whichever branch of the
// transaction holds it, nested transactions (OpTxn) included — unless the door hides
// those keys and asks to delete around them (TxnOptions.DeleteAroundReserved,
// carveReserved). Reads stay allowed.
func (s *Server) checkReservedWrites(txn *fsm.Txn) error {
	if txn == nil {
		return nil
	}
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, op := range ops {
			if op.Type == fsm.OpTxn {
				if err := s.checkReservedWrites(op.Txn); err != nil {
					return err
				}
				continue
			}
			if err := s.checkReservedOp(op); err != nil {
				return err
			}
		}
	}
	return nil
}

// reservedKey reports whether key is one the KV API may not write (checkReservedOp):
// keel's own records and the keys of typed resources. Doors that expose a plain
// keyspace (the etcd door) hide such keys from reads and watches too.
func (s *Server) reservedKey(key []byte) bool {
	return s.checkReservedOp(fsm.Op{Type: fsm.OpPut, Key: key}) != nil
}

func (s *Server) checkReservedOp(op fsm.Op) error {
	if op.Type != fsm.OpPut && op.Type != fsm.OpDelete && op.Type != fsm.OpDeleteRange {
		return nil
	}
	if writesUnder(op, []byte(versions.SystemPrefix)) {
		return fmt.Errorf("%w: keys under %q are keel's own records and cannot be written through the KV API",
			ErrReservedPrefix, versions.SystemPrefix)
	}
	p := s.resources.Load()
	if p == nil {
		return nil
	}
	for _, r := range (*p).Schema().Resources {
		if k := r.KeyMigration; k != nil && writesUnder(op, []byte(k.To)) {
			return fmt.Errorf("%w: key %q is under %q, the new key range of key migration %s of resource %s: "+
				"its objects are written through /apis/%s/{version}/%s/{name}, never through the KV API",
				ErrReservedPrefix, op.Key, k.To, k.Name, r.Key(), r.Group, r.Name)
		}
		if writesUnder(op, []byte(r.Prefix)) {
			what := fmt.Sprintf("key %q is", op.Key)
			if op.Type == fsm.OpDeleteRange {
				what = fmt.Sprintf("range [%q, %q) overlaps", op.Key, op.End)
			}
			return fmt.Errorf("%w: %s under the prefix %q of resource %s: its objects are written through "+
				"/apis/%s/{version}/%s/{name} (served versions %v), never through the KV API",
				ErrReservedPrefix, what, r.Prefix, r.Key(), r.Group, r.Name, r.Served())
		}
	}
	return nil
}

// writesUnder reports whether a write op touches a key with the given prefix: a put
// or delete of such a key, or a delete range [Key, End) (End empty = no end) that
// overlaps [prefix, PrefixEnd(prefix)).
func writesUnder(op fsm.Op, prefix []byte) bool {
	if op.Type != fsm.OpDeleteRange {
		return bytes.HasPrefix(op.Key, prefix)
	}
	end := fsm.PrefixEnd(prefix)
	return (end == nil || bytes.Compare(op.Key, end) < 0) && (len(op.End) == 0 || bytes.Compare(op.End, prefix) > 0)
}

// A wipe: a delete range that overlaps keys keel reserves and holds other keys too
// deletes those others and leaves keel's keys alone (`etcdctl del "" --from-key`
// deletes every key the caller may write; keel's records and typed resources stay).
// carveReserved turns each such op into the delete ranges of its pieces between the
// reserved ranges, in the same transaction, so the wipe is one revision; the caller's
// rights are then checked on those pieces. A range that lies wholly inside reserved
// ranges stays as it is, and checkReservedWrites refuses it, naming the prefix. fold
// gives the transaction's result back the shape of txn: one answer per op, the pieces'
// deleted counts added up and their previous versions in key order.
func (s *Server) carveReserved(txn *fsm.Txn) (carved *fsm.Txn, fold func(*fsm.Result) *fsm.Result) {
	reserved := s.reservedRanges()
	t, plan := carveTxn(txn, reserved)
	if plan == nil {
		return txn, func(r *fsm.Result) *fsm.Result { return r }
	}
	return t, func(r *fsm.Result) *fsm.Result { return plan.fold(r) }
}

// carvePlan says, for each op of a transaction's branches, how many ops it became
// (0 or 1: itself) and, for a nested transaction, its own plan.
type carvePlan struct{ success, failure []carvedOp }

type carvedOp struct {
	pieces int
	nested *carvePlan
}

// carveTxn carves txn's delete ranges; plan is nil when none changed.
func carveTxn(txn *fsm.Txn, reserved [][2][]byte) (*fsm.Txn, *carvePlan) {
	if txn == nil {
		return nil, nil
	}
	out := *txn
	var plan carvePlan
	changed := false
	branch := func(ops []fsm.Op) ([]fsm.Op, []carvedOp) {
		res := make([]fsm.Op, 0, len(ops))
		p := make([]carvedOp, len(ops))
		for i, op := range ops {
			switch {
			case op.Type == fsm.OpTxn:
				nt, np := carveTxn(op.Txn, reserved)
				if np != nil {
					changed = true
					op.Txn = nt
					p[i].nested = np
				}
			case op.Type == fsm.OpDeleteRange:
				if pieces := carveRange(op.Key, op.End, reserved); len(pieces) > 0 && !(len(pieces) == 1 &&
					bytes.Equal(pieces[0][0], op.Key) && bytes.Equal(pieces[0][1], op.End)) {
					changed = true
					p[i].pieces = len(pieces)
					for _, pc := range pieces {
						piece := op
						piece.Key, piece.End = pc[0], pc[1]
						res = append(res, piece)
					}
					continue
				}
			}
			res = append(res, op)
		}
		return res, p
	}
	out.Success, plan.success = branch(txn.Success)
	out.Failure, plan.failure = branch(txn.Failure)
	if !changed {
		return txn, nil
	}
	return &out, &plan
}

// fold gives r (the carved transaction's result) the shape of the transaction the
// plan was made from.
func (p *carvePlan) fold(r *fsm.Result) *fsm.Result {
	if r == nil || r.Err != nil {
		return r
	}
	ops := p.failure
	if r.Succeeded {
		ops = p.success
	}
	out := *r
	out.Responses = make([]fsm.OpResponse, 0, len(ops))
	i := 0
	for _, op := range ops {
		if i >= len(r.Responses) {
			break // not every op answers (a failed guard's branch may be empty)
		}
		switch {
		case op.pieces > 1:
			merged := fsm.OpResponse{Type: fsm.OpDeleteRange}
			for _, resp := range r.Responses[i : i+op.pieces] {
				merged.Deleted += resp.Deleted
				merged.PrevKVs = append(merged.PrevKVs, resp.PrevKVs...)
			}
			out.Responses = append(out.Responses, merged)
			i += op.pieces
			continue
		case op.nested != nil:
			resp := r.Responses[i]
			resp.Txn = op.nested.fold(resp.Txn)
			out.Responses = append(out.Responses, resp)
		default:
			out.Responses = append(out.Responses, r.Responses[i])
		}
		i++
	}
	return &out
}

// carveRange is [key, end) (end empty: no end) without the reserved ranges (sorted,
// disjoint; an end nil or empty is no end): its pieces, in key order.
func carveRange(key, end []byte, reserved [][2][]byte) [][2][]byte {
	var pieces [][2][]byte
	cur := key
	for _, r := range reserved {
		if len(end) > 0 && bytes.Compare(r[0], end) >= 0 {
			break
		}
		if len(r[1]) > 0 && bytes.Compare(r[1], cur) <= 0 {
			continue
		}
		if bytes.Compare(r[0], cur) > 0 {
			pieces = append(pieces, [2][]byte{cur, r[0]})
		}
		if len(r[1]) == 0 {
			return pieces // the reserved range runs to the end of the keyspace
		}
		cur = r[1]
	}
	if len(end) == 0 || bytes.Compare(cur, end) < 0 {
		pieces = append(pieces, [2][]byte{cur, end})
	}
	return pieces
}

// reservedRanges are the key ranges checkReservedOp guards (keel's records, each
// typed resource's prefix and key-migration range), sorted and merged.
func (s *Server) reservedRanges() [][2][]byte {
	prefixes := [][]byte{[]byte(versions.SystemPrefix)}
	if p := s.resources.Load(); p != nil {
		for _, r := range (*p).Schema().Resources {
			prefixes = append(prefixes, []byte(r.Prefix))
			if k := r.KeyMigration; k != nil {
				prefixes = append(prefixes, []byte(k.To))
			}
		}
	}
	ranges := make([][2][]byte, 0, len(prefixes))
	for _, p := range prefixes {
		ranges = append(ranges, [2][]byte{p, fsm.PrefixEnd(p)})
	}
	slices.SortFunc(ranges, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
	merged := ranges[:0]
	for _, r := range ranges {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			if len(last[1]) == 0 {
				break // the last one runs to the end: it holds the rest
			}
			if bytes.Compare(r[0], last[1]) <= 0 {
				if len(r[1]) == 0 || bytes.Compare(r[1], last[1]) > 0 {
					last[1] = r[1]
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	return merged
}

// CheckImportedKey says whether this node can hold key with value (one version of
// it) taken from another store's snapshot (an etcd import): nil, or the error a write
// of it through the KV API would get — the key not UTF-8, empty or too long
// (ErrInvalidKey, ErrEmptyKey), the value over the limit (ErrTooLarge), the key under
// a prefix the KV API does not own (ErrReservedPrefix). The import lists every key it
// refuses before it restores anything.
func (s *Server) CheckImportedKey(key, value []byte) error {
	if err := s.lim.checkKey(string(key)); err != nil {
		return err
	}
	if int64(len(value)) > s.lim.maxValueBytes {
		return fmt.Errorf("%w: value is %d bytes, more than the maximum %d", ErrTooLarge, len(value), s.lim.maxValueBytes)
	}
	return s.checkReservedOp(fsm.Op{Type: fsm.OpPut, Key: key})
}
