package kv

import (
	"context"

	"github.com/keel-kv/keel/fsm"
)

// The core's paged list (see core.go): one page of the keys under a prefix, resumed by
// continue tokens that are valid on every node (list.go reads the pages).

// RevisionMatch says how a list's Revision is matched (Kubernetes' resourceVersionMatch
// for raw lists).
type RevisionMatch uint8

const (
	// MatchUnset: Revision N is read exactly (Exact); none is the latest.
	MatchUnset RevisionMatch = iota
	// MatchExact: the list is read at Revision exactly.
	MatchExact
	// MatchNotOlderThan: the list is read at a revision not older than Revision.
	MatchNotOlderThan
)

// ListRequest is one page of the keys starting with Prefix ("" for every key).
type ListRequest struct {
	Prefix       string
	Limit        int64 // 0: the whole list, or ErrListTooLarge; at most MaxListLimit
	Revision     int64 // 0: the latest
	Serializable bool
	Continue     string // the previous page's token
	Match        RevisionMatch
}

// ListResult is one page: its keys in key order, the revision they were read at, the
// token of the next page ("" after the last) and the keys after this page (-1 when not
// counted).
type ListResult struct {
	KVs       []fsm.KeyValue
	Revision  int64
	Continue  string
	Remaining int64
}

// List reads one page of r for c: only the keys c may read (ErrForbidden when it may
// read none of the prefix), the prefix checked like a key, the limit bounded by
// MaxListLimit.
func (s *Server) List(ctx context.Context, c Caller, r ListRequest) (ListResult, error) {
	req, v, err := s.listRequest(r)
	if err != nil {
		return ListResult{}, err
	}
	if req.keys, err = listRights(c.context(ctx), req.start, req.end); err != nil {
		return ListResult{}, err
	}
	if v.Semantics == ListNotOlderThan {
		if err := s.resolveVersion(ctx, &req, v); err != nil {
			return ListResult{}, err
		}
	}
	pg := listPage{remaining: -1}
	if req.limit == 0 {
		pg.kvs, pg.rev, err = s.scanAll(ctx, req)
	} else {
		req.count = true
		pg, err = s.scan(ctx, req)
	}
	if err != nil {
		return ListResult{}, err
	}
	return ListResult{KVs: pg.kvs, Revision: pg.rev, Continue: pg.cont, Remaining: pg.remaining}, nil
}

// listRequest validates r into a scan request and its revision semantics.
func (s *Server) listRequest(r ListRequest) (listRequest, ListVersion, error) {
	var req listRequest
	if r.Prefix != "" {
		if err := s.lim.checkKey(r.Prefix); err != nil {
			return req, ListVersion{}, err
		}
		req.start, req.end = []byte(r.Prefix), fsm.PrefixEnd([]byte(r.Prefix))
	}
	if err := s.lim.checkListLimit(r.Limit); err != nil {
		return req, ListVersion{}, err
	}
	req.limit, req.rev, req.token = int(r.Limit), r.Revision, r.Continue
	req.cons = fsm.Linearizable
	if r.Serializable {
		req.cons = fsm.Serializable
	}
	v, err := rawListVersion(r.Match, r.Revision, r.Continue != "")
	return req, v, err
}
