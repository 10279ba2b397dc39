package kv

import (
	"context"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// The core's single-key operations and keel's wire forms (see core.go), shared by the
// doors: api.KV, api.TxnResponse, api.Error.

// CheckKey accepts non-empty UTF-8 keys of at most MaxKeyBytes bytes (ErrInvalidKey):
// what every key of every operation is checked against.
func (s *Server) CheckKey(key string) error { return s.lim.checkKey(key) }

// Get reads key at rev (0: the latest) with consistency cons for c, and returns it
// with the revision read. The key is checked against the limits (non-empty UTF-8, at
// most MaxKeyBytes); c needs the read right on it.
func (s *Server) Get(ctx context.Context, c Caller, key string, rev int64, cons fsm.Consistency) (fsm.KeyValue, int64, error) {
	if err := s.lim.checkKey(key); err != nil {
		return fsm.KeyValue{}, 0, err
	}
	return s.getKey(c.context(ctx), key, rev, cons)
}

// Put writes key = value attached to lease (0: none), only if the key's mod revision
// is prev when prev >= 0, and returns the revision written. The key and the value are
// checked against the limits; c needs the write right on the key; keys keel reserves
// are refused.
func (s *Server) Put(ctx context.Context, c Caller, key string, value []byte, prev, lease int64) (int64, error) {
	if err := s.CheckPut(c, key, lease); err != nil {
		return 0, err
	}
	if err := s.lim.checkValue(len(value)); err != nil {
		return 0, err
	}
	return s.putKey(c.context(ctx), key, value, prev, lease)
}

// CheckPut is what Put checks before it looks at the value: the key, the lease it
// names, c's write right on the key. A door that reads the value off the wire calls
// it first, so that a refused write's value is never read into memory.
func (s *Server) CheckPut(c Caller, key string, lease int64) error {
	if err := s.lim.checkKey(key); err != nil {
		return err
	}
	if err := checkLeaseRef(lease); err != nil {
		return err
	}
	if c.az != nil && !c.az.Key([]byte(key), true) {
		return acl.ForbiddenKey([]byte(key), true)
	}
	return nil
}

// Delete deletes key (every key with that prefix when prefix), only if its mod
// revision is prev when prev >= 0 (prev < 0: no guard). A guard must name a revision
// the key was written at (prev >= 1) and a single key (not prefix): ErrInvalidParam
// otherwise. c needs the write right on what it deletes.
func (s *Server) Delete(ctx context.Context, c Caller, key string, prefix bool, prev int64) (api.DeleteResponse, error) {
	if err := s.lim.checkKey(key); err != nil {
		return api.DeleteResponse{}, err
	}
	if err := checkDeleteGuard(prefix, prev); err != nil {
		return api.DeleteResponse{}, err
	}
	return s.deleteKey(c.context(ctx), key, prefix, prev)
}

// checkDeleteGuard is Delete's rule for its guard prev (< 0: none): a key that does
// not exist (mod revision 0) cannot be deleted, and a range has no one mod revision.
func checkDeleteGuard(prefix bool, prev int64) error {
	switch {
	case prev < 0:
		return nil
	case prefix:
		return fmt.Errorf("%w: prev_revision cannot be combined with a prefix delete", ErrInvalidParam)
	case prev < 1:
		return fmt.Errorf("%w: prev_revision of a delete must be at least 1", ErrInvalidParam)
	}
	return nil
}

// DecodeTxn decodes and validates a transaction in the KV API's JSON form
// (api.TxnRequest: unknown fields, trailing data and strings that are not UTF-8 are
// refused), ready for Txn. A body over MaxTxnBodyBytes is refused (ErrTooLarge) before
// it is decoded.
func (s *Server) DecodeTxn(body []byte) (*fsm.Txn, error) { return decodeTxn(body, s.lim) }

// CheckTxnBody is DecodeTxn's size rule alone: a door that knows a body's size before
// it reads it (HTTP's Content-Length) asks first, so that a body refused is never
// read, and answers in DecodeTxn's words.
func (s *Server) CheckTxnBody(size int64) error { return s.lim.checkTxnBody(size) }

// TxnResponse is a transaction's result in its wire form.
func TxnResponse(res *fsm.Result) api.TxnResponse { return txnResponse(res) }

// APIKV is a state machine key in its wire form.
func APIKV(kv fsm.KeyValue) api.KV { return toAPI(kv) }

// The single-key operations behind Get, Put and Delete; the key has been checked
// against the limits.

// getKey reads key at rev (0 = latest) and returns it with the revision read.
func (s *Server) getKey(ctx context.Context, key string, rev int64, cons fsm.Consistency) (fsm.KeyValue, int64, error) {
	if err := checkKey(ctx, []byte(key), false); err != nil {
		return fsm.KeyValue{}, 0, err
	}
	view, err := s.viewAt(ctx, cons, rev)
	if err != nil {
		return fsm.KeyValue{}, 0, err
	}
	if rev == 0 {
		rev = view.Revision()
	}
	kv, err := view.Get([]byte(key), rev)
	if err != nil {
		return fsm.KeyValue{}, 0, fmt.Errorf("get %q: %w", key, revisionError(view, rev, err))
	}
	return kv, rev, nil
}

// putKey writes key = value attached to lease (0 = none), only if the key's mod
// revision is prev when prev >= 0.
func (s *Server) putKey(ctx context.Context, key string, value []byte, prev, lease int64) (int64, error) {
	txn := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte(key), Value: value, Lease: lease}}}
	if prev >= 0 {
		guardModRevision(txn, key, prev)
	}
	res, err := s.applyTxn(ctx, txn, TxnOptions{})
	if err != nil {
		return 0, fmt.Errorf("put %q: %w", key, err)
	}
	if !res.Succeeded {
		return 0, conflictError(key, prev, res)
	}
	return res.Revision, nil
}

// deleteKey deletes key (every key with that prefix when prefix), only if its mod
// revision is prev when prev > 0 (checkDeleteGuard has refused any other guard).
func (s *Server) deleteKey(ctx context.Context, key string, prefix bool, prev int64) (api.DeleteResponse, error) {
	op := fsm.Op{Type: fsm.OpDelete, Key: []byte(key)}
	if prefix {
		op = fsm.Op{Type: fsm.OpDeleteRange, Key: []byte(key), End: fsm.PrefixEnd([]byte(key))}
	}
	txn := &fsm.Txn{Success: []fsm.Op{op}}
	if prev > 0 {
		guardModRevision(txn, key, prev)
	}
	res, err := s.applyTxn(ctx, txn, TxnOptions{})
	if err != nil {
		return api.DeleteResponse{}, fmt.Errorf("delete %q: %w", key, err)
	}
	if !res.Succeeded {
		return api.DeleteResponse{}, conflictError(key, prev, res)
	}
	resp := api.DeleteResponse{Revision: res.Revision}
	if len(res.Responses) > 0 {
		resp.Deleted = res.Responses[0].Deleted
	}
	return resp, nil
}

// guardModRevision makes txn run only if key's mod revision is prev (0 = absent); on
// failure it reads the key so the 409 can say what the revision is.
func guardModRevision(txn *fsm.Txn, key string, prev int64) {
	txn.Compares = []fsm.Compare{{Key: []byte(key), Target: fsm.TargetModRevision,
		Result: fsm.CompareEqual, Int: prev}}
	txn.Failure = []fsm.Op{{Type: fsm.OpGet, Key: []byte(key)}}
}

// conflictError describes a failed mod-revision guard from the failure branch's read.
func conflictError(key string, prev int64, res *fsm.Result) error {
	var cur int64
	if len(res.Responses) > 0 && len(res.Responses[0].KVs) > 0 {
		cur = res.Responses[0].KVs[0].ModRevision
	}
	switch {
	case cur == 0:
		return fmt.Errorf("%w: key %q does not exist, prev_revision was %d; nothing written",
			ErrConflict, key, prev)
	case prev == 0:
		return fmt.Errorf("%w: key %q already exists (mod revision %d); nothing written",
			ErrConflict, key, cur)
	}
	return fmt.Errorf("%w: key %q has mod revision %d, not %d; nothing written",
		ErrConflict, key, cur, prev)
}

// toAPI converts a state machine key to its wire form. The key bytes are UTF-8: every
// key entered through this API was checked.
// An empty value is sent as "" rather than null.
func toAPI(kv fsm.KeyValue) api.KV {
	value := kv.Value
	if value == nil {
		value = []byte{}
	}
	return api.KV{Key: string(kv.Key), Value: value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
}
