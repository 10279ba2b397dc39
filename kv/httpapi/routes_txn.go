package httpapi

import (
	"fmt"
	"net/http"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// handleTxn serves POST /v1/txn: body = api.TxnRequest → api.TxnResponse. A failed
// guard is a 200 with "succeeded":false (the failure branch ran), not an error.
func (s *Server) handleTxn(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	// The size rule is the core's (DecodeTxn): a body whose Content-Length breaks it
	// is refused unread, any other is read up to the limit and one byte more.
	if err := s.core.CheckTxnBody(r.ContentLength); err != nil {
		drainBody(w, r, s.cfg.MaxTxnBodyBytes)
		return fmt.Errorf("txn: %w", err)
	}
	body, err := readCapped(w, r, s.cfg.MaxTxnBodyBytes, "txn body")
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	txn, err := s.core.DecodeTxn(body)
	if err != nil {
		return fmt.Errorf("txn: %w", err)
	}
	res, err := s.core.Txn(ctx, CallerOf(r), txn, kv.TxnOptions{})
	if err != nil {
		return fmt.Errorf("txn: %w", err)
	}
	writeJSON(w, http.StatusOK, kv.TxnResponse(res))
	return nil
}

// handleCompact serves POST /v1/compact: body = api.CompactRequest. Reads below the
// new compact revision fail with 410 as soon as it applies; the space is reclaimed
// later in bounded chunks.
func (s *Server) handleCompact(w http.ResponseWriter, r *http.Request) error {
	if err := s.core.CheckCompact(CallerOf(r)); err != nil {
		drainBody(w, r, s.cfg.MaxTxnBodyBytes)
		return err // before the body is read
	}
	var req api.CompactRequest
	if err := decodeJSONBody(w, r, s.cfg.MaxTxnBodyBytes, "compact body", "compact", &req); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := s.core.Compact(ctx, CallerOf(r), req.Revision)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.CompactResponse{Revision: res.Revision, CompactRevision: req.Revision})
	return nil
}
