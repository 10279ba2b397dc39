package kv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/jsonutf8"
	"github.com/keel-kv/keel/kv/api"
)

// DecodeJSON decodes exactly one JSON object from body into v, rejecting unknown
// fields, trailing data, a null body, and strings that are not valid UTF-8 (which
// encoding/json would silently turn into U+FFFD).
func DecodeJSON(body []byte, v any) error {
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		return fmt.Errorf("%w: the body is null, want a JSON object", ErrInvalidBody)
	}
	if err := jsonutf8.Check(body); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidBody, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the JSON value", ErrInvalidBody)
	}
	return nil
}

// decodeTxn decodes and validates a POST /v1/txn body into a state machine Txn (see
// limits.txn).
func decodeTxn(body []byte, lim limits) (*fsm.Txn, error) {
	if err := lim.checkTxnBody(int64(len(body))); err != nil {
		return nil, err
	}
	var req api.TxnRequest
	if err := DecodeJSON(body, &req); err != nil {
		return nil, err
	}
	return lim.txn(req)
}

// txn validates a transaction of any door into a state machine Txn. It checks
// everything the state machine would reject, and the API limits, so a bad transaction
// fails here with a precise message before anything is proposed.
func (l limits) txn(req api.TxnRequest) (*fsm.Txn, error) {
	if name, n := overlongTxnList(len(req.Compare), len(req.Success), len(req.Failure)); name != "" {
		return nil, fmt.Errorf("%w: %d %s entries, more than the maximum %d: %w",
			ErrInvalidBody, n, name, fsm.MaxTxnOps, fsm.ErrTooManyOps)
	}
	txn := &fsm.Txn{}
	for i, c := range req.Compare {
		fc, err := l.compare(c)
		if err != nil {
			return nil, fmt.Errorf("compare[%d]: %w", i, err)
		}
		txn.Compares = append(txn.Compares, fc)
	}
	var err error
	if txn.Success, err = l.ops(req.Success, "success"); err != nil {
		return nil, err
	}
	if txn.Failure, err = l.ops(req.Failure, "failure"); err != nil {
		return nil, err
	}
	return txn, nil
}

// overlongTxnList names the first of a transaction's lists (compare, success,
// failure) holding more than fsm.MaxTxnOps entries, and its length; "" when none does.
// Every door asks it before translating a transaction.
func overlongTxnList(compares, success, failure int) (string, int) {
	for _, list := range []struct {
		name string
		n    int
	}{{"compare", compares}, {"success", success}, {"failure", failure}} {
		if list.n > fsm.MaxTxnOps {
			return list.name, list.n
		}
	}
	return "", 0
}

var (
	compareTargets = map[string]fsm.CompareTarget{
		api.TargetValue: fsm.TargetValue, api.TargetVersion: fsm.TargetVersion,
		api.TargetModRevision: fsm.TargetModRevision, api.TargetCreateRevision: fsm.TargetCreateRevision,
		api.TargetExists: fsm.TargetExists,
	}
	compareResults = map[string]fsm.CompareResult{
		api.ResultEqual: fsm.CompareEqual, api.ResultNotEqual: fsm.CompareNotEqual,
		api.ResultLess: fsm.CompareLess, api.ResultGreater: fsm.CompareGreater,
	}
)

// compare validates one guard.
func (l limits) compare(c api.Compare) (fsm.Compare, error) {
	if err := l.checkKey(c.Key); err != nil {
		return fsm.Compare{}, err
	}
	target, ok := compareTargets[c.Target]
	if !ok {
		return fsm.Compare{}, fmt.Errorf("%w: unknown target %q", ErrInvalidBody, c.Target)
	}
	result, ok := compareResults[c.Result]
	if !ok {
		return fsm.Compare{}, fmt.Errorf("%w: unknown result %q", ErrInvalidBody, c.Result)
	}
	switch {
	case target == fsm.TargetValue && c.Int != 0:
		return fsm.Compare{}, fmt.Errorf("%w: target %q takes value, not int", ErrInvalidBody, c.Target)
	case target != fsm.TargetValue && c.Value != nil:
		return fsm.Compare{}, fmt.Errorf("%w: target %q takes int, not value", ErrInvalidBody, c.Target)
	case target == fsm.TargetExists && (c.Int < 0 || c.Int > 1):
		return fsm.Compare{}, fmt.Errorf("%w: target exists takes int 0 or 1, not %d", ErrInvalidBody, c.Int)
	case target == fsm.TargetExists && result != fsm.CompareEqual && result != fsm.CompareNotEqual:
		return fsm.Compare{}, fmt.Errorf("%w: target exists takes only equal or not_equal", ErrInvalidBody)
	case target != fsm.TargetValue && c.Int < 0:
		return fsm.Compare{}, fmt.Errorf("%w: int %d is negative", ErrInvalidBody, c.Int)
	}
	if err := l.checkValue(len(c.Value)); err != nil {
		return fsm.Compare{}, err
	}
	return fsm.Compare{Key: []byte(c.Key), Target: target, Result: result, Value: c.Value, Int: c.Int}, nil
}

// ops validates one branch of operations.
func (l limits) ops(ops []api.Op, branch string) ([]fsm.Op, error) {
	out := make([]fsm.Op, 0, len(ops))
	for i, op := range ops {
		fop, err := l.op(op)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", branch, i, err)
		}
		out = append(out, fop)
	}
	return out, nil
}

var opTypes = map[string]fsm.OpType{
	api.OpPut: fsm.OpPut, api.OpDelete: fsm.OpDelete,
	api.OpDeleteRange: fsm.OpDeleteRange, api.OpGet: fsm.OpGet,
}

// op validates one operation and resolves its range.
func (l limits) op(op api.Op) (fsm.Op, error) {
	typ, ok := opTypes[op.Type]
	if !ok {
		return fsm.Op{}, fmt.Errorf("%w: unknown op type %q", ErrInvalidBody, op.Type)
	}
	if err := l.checkKey(op.Key); err != nil {
		return fsm.Op{}, err
	}
	ranged := op.End != "" || op.Prefix
	switch {
	case op.Value != nil && typ != fsm.OpPut:
		return fsm.Op{}, fmt.Errorf("%w: only put takes a value", ErrInvalidBody)
	case ranged && typ != fsm.OpDeleteRange && typ != fsm.OpGet:
		return fsm.Op{}, fmt.Errorf("%w: %s takes no end or prefix", ErrInvalidBody, op.Type)
	case typ == fsm.OpDeleteRange && !ranged:
		return fsm.Op{}, fmt.Errorf("%w: delete_range needs end or prefix", ErrInvalidBody)
	case op.End != "" && op.Prefix:
		return fsm.Op{}, fmt.Errorf("%w: end and prefix are mutually exclusive", ErrInvalidBody)
	case op.Limit != 0 && (typ != fsm.OpGet || !ranged):
		return fsm.Op{}, fmt.Errorf("%w: only a ranged get takes a limit", ErrInvalidBody)
	case op.Lease != 0 && typ != fsm.OpPut:
		return fsm.Op{}, fmt.Errorf("%w: only put takes a lease", ErrInvalidBody)
	}
	if err := l.checkListLimit(op.Limit); err != nil {
		return fsm.Op{}, err
	}
	if err := checkLeaseRef(op.Lease); err != nil {
		return fsm.Op{}, err
	}
	out := fsm.Op{Type: typ, Key: []byte(op.Key), Value: op.Value, Limit: op.Limit, Lease: op.Lease}
	if err := l.resolveEnd(&out, op); err != nil {
		return fsm.Op{}, err
	}
	if typ == fsm.OpPut {
		if out.Value == nil {
			out.Value = []byte{}
		}
		if err := l.checkValue(len(out.Value)); err != nil {
			return fsm.Op{}, err
		}
	}
	return out, nil
}

// resolveEnd sets out.End from op's end or prefix, and bounds a ranged get.
func (l limits) resolveEnd(out *fsm.Op, op api.Op) error {
	switch {
	case op.Prefix:
		out.End = fsm.PrefixEnd(out.Key) // never nil: a UTF-8 key holds no 0xff byte
	case op.End != "":
		if len(op.End) > l.maxKeyBytes || op.End <= op.Key {
			return fmt.Errorf("%w: end must sort after key and be at most %d bytes", ErrInvalidBody, l.maxKeyBytes)
		}
		out.End = []byte(op.End)
	default:
		return nil
	}
	if out.Type == fsm.OpGet && out.Limit == 0 {
		out.Limit = int64(l.maxListLimit)
	}
	return nil
}

// txnResponse converts a state machine result to its wire form.
func txnResponse(res *fsm.Result) api.TxnResponse {
	resp := api.TxnResponse{Revision: res.Revision, Succeeded: res.Succeeded,
		Responses: make([]api.OpResponse, 0, len(res.Responses))}
	for _, r := range res.Responses {
		or := api.OpResponse{Type: opNames[r.Type], Deleted: r.Deleted, More: r.More}
		if r.PrevKV != nil {
			prev := toAPI(*r.PrevKV)
			or.PrevKV = &prev
		}
		for _, kv := range r.KVs {
			or.KVs = append(or.KVs, toAPI(kv))
		}
		resp.Responses = append(resp.Responses, or)
	}
	return resp
}

var opNames = map[fsm.OpType]string{
	fsm.OpPut: api.OpPut, fsm.OpDelete: api.OpDelete,
	fsm.OpDeleteRange: api.OpDeleteRange, fsm.OpGet: api.OpGet,
}
