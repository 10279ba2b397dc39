package kv

import (
	"bytes"
	"fmt"

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
// transaction holds it, nested transactions (OpTxn) included. Reads stay allowed.
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
