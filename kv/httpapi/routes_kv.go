package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// getParams are the parameters of GET /v1/kv/{key...}, a package variable so a
// request does not allocate the list.
var getParams = []string{api.ParamRevision, api.ParamConsistency, api.ParamRaw,
	api.ParamList, api.ParamLimit, api.ParamContinue, api.ParamRevisionMatch}

// handleGet serves GET /v1/kv/{key...}: one key, or a list page with ?list=true.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) error {
	p, err := parseParams(r, getParams...)
	if err != nil {
		return err
	}
	if list, err := p.bool(api.ParamList); err != nil || list {
		if err != nil {
			return err
		}
		return s.handleList(w, r, p)
	}
	if p.has(api.ParamLimit) || p.has(api.ParamContinue) || p.has(api.ParamRevisionMatch) {
		return fmt.Errorf("%w: limit, continue and revision_match need list=true", kv.ErrInvalidParam)
	}
	key := r.PathValue("key")
	if err := s.core.CheckKey(key); err != nil {
		return err
	}
	rev, err := p.int64(api.ParamRevision, 0, 0)
	if err != nil {
		return err
	}
	cons, err := p.consistency()
	if err != nil {
		return err
	}
	raw, err := p.bool(api.ParamRaw)
	if err != nil {
		return err
	}
	// Only a linearizable read waits (for the leader's read index); a serializable one
	// reads local state at once and needs no deadline of its own (a timer and a
	// context per request saved).
	ctx := r.Context()
	if cons == fsm.Linearizable {
		var cancel context.CancelFunc
		ctx, cancel = s.requestContext(r)
		defer cancel()
	}
	kv, rev, err := s.core.Get(ctx, CallerOf(r), key, rev, cons)
	if err != nil {
		return err
	}
	if raw {
		writeRaw(w, kv, rev)
		return nil
	}
	writeGet(w, kv, rev)
	return nil
}

// writeRaw answers a ?raw=true GET: the bare value, metadata in X-Keel-* headers.
func writeRaw(w http.ResponseWriter, kv fsm.KeyValue, rev int64) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(kv.Value)))
	h.Set(api.HeaderRevision, strconv.FormatInt(rev, 10))
	h.Set(api.HeaderCreateRevision, strconv.FormatInt(kv.CreateRevision, 10))
	h.Set(api.HeaderModRevision, strconv.FormatInt(kv.ModRevision, 10))
	h.Set(api.HeaderVersion, strconv.FormatInt(kv.Version, 10))
	w.WriteHeader(http.StatusOK)
	w.Write(kv.Value)
}

// handlePut serves PUT /v1/kv/{key...}: body = value, ?prev_revision=N for CAS,
// ?lease=ID to attach the key to a lease (none detaches it).
func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) error {
	p, err := parseParams(r, api.ParamPrevRevision, api.ParamLease)
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	prev, err := p.int64(api.ParamPrevRevision, 0, -1)
	if err != nil {
		return err
	}
	lease, err := p.int64(api.ParamLease, 1, 0)
	if err != nil {
		return err
	}
	// The key, the lease and the rights before the body: a refused write's value is
	// not read into memory (only discarded, so the client sees the answer).
	if err := s.core.CheckPut(CallerOf(r), key, lease); err != nil {
		drainBody(w, r, s.cfg.MaxValueBytes)
		return err
	}
	value, err := readBody(w, r, s.cfg.MaxValueBytes, "value")
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	rev, err := s.core.Put(ctx, CallerOf(r), key, value, prev, lease)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PutResponse{Revision: rev})
	return nil
}

// handleDelete serves DELETE /v1/kv/{key...}: ?prev_revision=N for CAS, ?prefix=true
// to delete every key starting with the path key.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) error {
	p, err := parseParams(r, api.ParamPrevRevision, api.ParamPrefix)
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	if err := s.core.CheckKey(key); err != nil {
		return err
	}
	prefix, err := p.bool(api.ParamPrefix)
	if err != nil {
		return err
	}
	prev, err := p.int64(api.ParamPrevRevision, 0, -1) // -1: absent; the core says which guards a delete takes
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	resp, err := s.core.Delete(ctx, CallerOf(r), key, prefix, prev)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
