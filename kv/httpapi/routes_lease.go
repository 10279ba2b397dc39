package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// leaseRoutes registers /v1/leases (see api.PathLeases).
// Every lease route asks the core's lease right first (kv.Server.CheckLeases), so a
// caller without it is refused before its parameters or body are looked at.
func (s *Server) leaseRoutes() {
	s.route(api.PathLeases, map[string]handlerFunc{
		http.MethodPost: s.leaseRight(s.handleLeaseGrant),
		http.MethodGet:  s.leaseRight(s.handleLeaseList),
	})
	s.route(api.PathLeases+"/{id}", map[string]handlerFunc{
		http.MethodGet:    s.leaseRight(s.handleLeaseGet),
		http.MethodDelete: s.leaseRight(s.handleLeaseRevoke),
	})
	s.route(api.PathLeases+"/{id}/keepalive", map[string]handlerFunc{http.MethodPost: s.leaseRight(s.handleLeaseKeepAlive)})
}

// leaseRight runs h for a caller the core lets use leases.
func (s *Server) leaseRight(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := s.core.CheckLeases(CallerOf(r)); err != nil {
			drainBody(w, r, s.cfg.MaxTxnBodyBytes)
			return err
		}
		return h(w, r)
	}
}

// leaseID parses the {id} path value.
func leaseID(r *http.Request) (int64, error) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: lease ID %q must be a positive 64-bit integer", kv.ErrInvalidParam, v)
	}
	return id, nil // the core checks its range
}

// handleLeaseGrant serves POST /v1/leases.
func (s *Server) handleLeaseGrant(w http.ResponseWriter, r *http.Request) error {
	var req api.LeaseGrantRequest
	if err := decodeJSONBody(w, r, s.cfg.MaxTxnBodyBytes, "lease grant body", "lease grant", &req); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	id, err := s.core.LeaseGrant(ctx, CallerOf(r), req.ID, req.TTL)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.LeaseGrantResponse{ID: id, TTL: req.TTL})
	return nil
}

// leaseIDParam checks a lease route's query parameters and parses its {id}.
func leaseIDParam(r *http.Request) (int64, error) {
	if _, err := parseParams(r); err != nil {
		return 0, err
	}
	return leaseID(r)
}

// handleLeaseRevoke serves DELETE /v1/leases/{id}.
func (s *Server) handleLeaseRevoke(w http.ResponseWriter, r *http.Request) error {
	id, err := leaseIDParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	resp, err := s.core.LeaseRevoke(ctx, CallerOf(r), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleLeaseKeepAlive serves POST /v1/leases/{id}/keepalive; the leader answers.
func (s *Server) handleLeaseKeepAlive(w http.ResponseWriter, r *http.Request) error {
	id, err := leaseIDParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	left, err := s.core.LeaseKeepAlive(ctx, CallerOf(r), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.LeaseKeepAliveResponse{ID: id, TTL: int64(left / time.Second), TTLMillis: left.Milliseconds()})
	return nil
}

// handleLeaseGet serves GET /v1/leases/{id}.
func (s *Server) handleLeaseGet(w http.ResponseWriter, r *http.Request) error {
	id, err := leaseIDParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	resp, err := s.core.LeaseTimeToLive(ctx, CallerOf(r), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleLeaseList serves GET /v1/leases.
func (s *Server) handleLeaseList(w http.ResponseWriter, r *http.Request) error {
	p, err := parseParams(r, api.ParamConsistency)
	if err != nil {
		return err
	}
	cons, err := p.consistency()
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	resp, err := s.core.Leases(ctx, CallerOf(r), cons)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
