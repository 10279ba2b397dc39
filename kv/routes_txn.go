package kv

import (
	"context"
	"fmt"
	"net/http"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// handleTxn serves POST /v1/txn: body = api.TxnRequest → api.TxnResponse. A failed
// guard is a 200 with "succeeded":false (the failure branch ran), not an error.
func (s *Server) handleTxn(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	body, err := readBody(w, r, s.cfg.MaxTxnBodyBytes, "txn body")
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	_, res, err := s.runTxn(ctx, body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, txnResponse(res))
	return nil
}

// runTxn decodes and applies the JSON body of a transaction (POST /v1/txn, or the
// stream protocol's txn op).
func (s *Server) runTxn(ctx context.Context, body []byte) (*fsm.Txn, *fsm.Result, error) {
	txn, err := decodeTxn(body, s.lim)
	if err != nil {
		return nil, nil, fmt.Errorf("txn: %w", err)
	}
	res, err := s.applyTxn(ctx, txn)
	if err != nil {
		return nil, nil, fmt.Errorf("txn: %w", err)
	}
	return txn, res, nil
}

// handleCompact serves POST /v1/compact: body = api.CompactRequest. Reads below the
// new compact revision fail with 410 as soon as it applies; the space is reclaimed
// later in bounded chunks.
func (s *Server) handleCompact(w http.ResponseWriter, r *http.Request) error {
	var req api.CompactRequest
	if err := decodeJSONBody(w, r, s.cfg.MaxTxnBodyBytes, "compact body", "compact", &req); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := s.compact(ctx, req.Revision)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.CompactResponse{Revision: res.Revision, CompactRevision: req.Revision})
	return nil
}

// compact compacts history up to rev (the HTTP route and the etcd door); the caller
// has checked the compact right.
func (s *Server) compact(ctx context.Context, rev int64) (*fsm.Result, error) {
	if rev < 1 {
		return nil, fmt.Errorf("compact: %w: revision %d must be >= 1", ErrInvalidBody, rev)
	}
	res, err := s.apply(ctx, &fsm.Command{Type: fsm.CmdCompact, Revision: rev})
	if err != nil {
		return nil, fmt.Errorf("compact to revision %d: %w", rev, err)
	}
	return res, nil
}
