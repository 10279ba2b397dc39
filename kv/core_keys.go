package kv

import (
	"context"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// The core's single-key operations and keel's wire forms (see core.go), shared by the
// HTTP routes and the stream protocol: api.KV, api.TxnResponse, api.Error.

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
	if err := s.lim.checkKey(key); err != nil {
		return 0, err
	}
	if err := s.lim.checkValue(len(value)); err != nil {
		return 0, err
	}
	if lease < 0 || lease > api.MaxLeaseID {
		return 0, fmt.Errorf("%w: lease %d above %d", ErrInvalidParam, lease, int64(api.MaxLeaseID))
	}
	return s.putKey(c.context(ctx), key, value, prev, lease)
}

// Delete deletes key (every key with that prefix when prefix), only if its mod
// revision is prev when prev > 0. c needs the write right on what it deletes.
func (s *Server) Delete(ctx context.Context, c Caller, key string, prefix bool, prev int64) (api.DeleteResponse, error) {
	if err := s.lim.checkKey(key); err != nil {
		return api.DeleteResponse{}, err
	}
	return s.deleteKey(c.context(ctx), key, prefix, prev)
}

// DecodeTxn decodes and validates a transaction in the KV API's JSON form
// (api.TxnRequest: unknown fields, trailing data and strings that are not UTF-8 are
// refused), ready for Txn.
func (s *Server) DecodeTxn(body []byte) (*fsm.Txn, error) { return decodeTxn(body, s.lim) }

// TxnResponse is a transaction's result in its wire form.
func TxnResponse(res *fsm.Result) api.TxnResponse { return txnResponse(res) }

// APIKV is a state machine key in its wire form.
func APIKV(kv fsm.KeyValue) api.KV { return toAPI(kv) }

// WireError is keel's one error table (errors.go) in its wire form: the status code,
// reason and message of err, for the HTTP routes and the stream protocol alike. write
// says the request could have changed state (an unknown outcome is then said so).
func WireError(err error, write bool) api.Error { return errorBody(err, write) }
