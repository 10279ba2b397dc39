package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

var (
	// ErrListTooLarge (413 ListTooLarge): a list that did not ask for pages holds more
	// than one answer may (Config.MaxListLimit items or MaxListBytes bytes).
	ErrListTooLarge = fmt.Errorf("%w: list too large for one answer", ErrTooLarge)
	// ErrTooLargeResourceVersion (504 ResourceVersionTooLarge): a list asked for a
	// revision the cluster has not reached (Kubernetes' "Too large resource version").
	ErrTooLargeResourceVersion = errors.New("kv: too large resource version")
)

// ListSemantics is which revision a list reads: Kubernetes' "semantics for get and
// list" (API concepts, Resource versions), one per cell of its table.
type ListSemantics int

const (
	ListMostRecent   ListSemantics = iota // resourceVersion unset: the latest revision
	ListAny                               // "0": whatever the answering node has applied
	ListNotOlderThan                      // N: the node's latest revision, once it is >= N
	ListExact                             // N: revision N itself (410 once compacted)
	ListContinue                          // a continue token: the token's revision exactly
)

// ListVersion is the parsed revision choice of a list: the typed list's
// resourceVersion and resourceVersionMatch (kv/resources parses Kubernetes' table) or
// the raw list's revision and revision_match (rawListVersion).
type ListVersion struct {
	Semantics ListSemantics
	Revision  int64 // N of ListNotOlderThan and ListExact
}

// rawListVersion is the raw list's mapping onto the same semantics: revision=N is
// Exact unless revision_match=not_older_than; no revision is MostRecent (Any is
// consistency=serializable, which keeps its own meaning). cont says a continue token
// is given.
func rawListVersion(match RevisionMatch, rev int64, cont bool) (ListVersion, error) {
	switch {
	case match == MatchUnset:
	case rev == 0:
		return ListVersion{}, fmt.Errorf("%w: %s needs %s=N", ErrInvalidParam, api.ParamRevisionMatch, api.ParamRevision)
	case cont:
		return ListVersion{}, fmt.Errorf("%w: %s is forbidden with continue (the token carries its revision)",
			ErrInvalidParam, api.ParamRevisionMatch)
	}
	switch {
	case cont:
		return ListVersion{Semantics: ListContinue}, nil
	case rev == 0:
		return ListVersion{Semantics: ListMostRecent}, nil
	case match == MatchNotOlderThan:
		return ListVersion{Semantics: ListNotOlderThan, Revision: rev}, nil
	}
	return ListVersion{Semantics: ListExact, Revision: rev}, nil
}

// resolveVersion fixes req's revision for v. MostRecent and Continue keep req as it is
// (req.cons decides MostRecent's freshness); Any reads the node's applied state.
// NotOlderThan and Exact first make sure the cluster has reached N, reading the node's
// local state when it has (no round trip) and a linearizable view otherwise; a
// revision beyond the cluster's is ErrTooLargeResourceVersion. Unlike Kubernetes'
// watch cache keel does not wait for it: the linearizable view already holds every
// write acknowledged so far, so N is not a revision anyone was told of.
func (s *Server) resolveVersion(ctx context.Context, req *listRequest, v ListVersion) error {
	switch v.Semantics {
	case ListAny:
		req.cons = fsm.Serializable
		return nil
	case ListNotOlderThan, ListExact:
	default:
		return nil
	}
	view, err := s.viewAt(ctx, fsm.Linearizable, v.Revision)
	if err != nil {
		return err
	}
	if view.Revision() < v.Revision {
		return fmt.Errorf("%w: Too large resource version: %d, current: %d", ErrTooLargeResourceVersion, v.Revision, view.Revision())
	}
	req.rev, req.cons = v.Revision, fsm.Serializable
	if v.Semantics == ListNotOlderThan {
		req.rev = view.Revision() // the newest this node has; the scan's own view has it too
	}
	return nil
}

// scanAll reads the whole of req's range at one revision, for a list that did not ask
// for pages: at most Config.MaxListLimit items and MaxListBytes bytes (fitPage's
// estimate), ErrListTooLarge beyond either, so that one answer stays bounded in
// memory. It follows its own continue tokens page by page.
func (s *Server) scanAll(ctx context.Context, req listRequest) ([]fsm.KeyValue, int64, error) {
	var all []fsm.KeyValue
	size := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		req.limit = s.cfg.MaxListLimit + 1 - len(all)
		pg, err := s.scan(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		for _, kv := range pg.kvs {
			size += itemBytes(kv)
		}
		all = append(all, pg.kvs...)
		if len(all) > s.cfg.MaxListLimit || size > s.cfg.MaxListBytes {
			return nil, 0, fmt.Errorf("%w: the range holds more than %d items or %d bytes, the most one answer "+
				"without ?limit= holds; ask for pages with ?limit=N (N <= %d) and follow the continue tokens",
				ErrListTooLarge, s.cfg.MaxListLimit, s.cfg.MaxListBytes, s.cfg.MaxListLimit)
		}
		if pg.cont == "" {
			return all, pg.rev, nil
		}
		req.token, req.rev = pg.cont, pg.rev
	}
}
