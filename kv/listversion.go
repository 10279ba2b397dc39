package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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

// rvSemantics is which revision a list reads: Kubernetes' "semantics for get and
// list" (API concepts, Resource versions), one per cell of its table.
type rvSemantics int

const (
	rvMostRecent   rvSemantics = iota // resourceVersion unset: the latest revision
	rvAny                             // "0": whatever the answering node has applied
	rvNotOlderThan                    // N: the node's latest revision, once it is >= N
	rvExact                           // N: revision N itself (410 once compacted)
	rvContinue                        // a continue token: the token's revision exactly
)

// Values of the typed list's resourceVersionMatch (Kubernetes' spelling).
const (
	matchExact        = "Exact"
	matchNotOlderThan = "NotOlderThan"
)

// listVersion is the parsed revision choice of a list.
type listVersion struct {
	sem rvSemantics
	rev int64 // N of rvNotOlderThan and rvExact
}

// parseListVersion applies Kubernetes' table to a typed list's resourceVersion (rv,
// "" = unset), resourceVersionMatch (match, "" = unset), and whether limit and
// continue are given, with the 400s of its ValidateListOptions and etcd3 store:
//
//	match \ rv                 unset        "0"       N
//	unset, no limit            MostRecent   Any       NotOlderThan
//	unset, limit               MostRecent   Any       Exact
//	unset, continue            Continue     Continue  400
//	Exact                      400          400       Exact
//	NotOlderThan               400          Any       NotOlderThan
//	Exact|NotOlderThan + continue: 400
func parseListVersion(rv, match string, limited, cont bool) (listVersion, error) {
	if match != "" {
		switch {
		case rv == "":
			return listVersion{}, fmt.Errorf("%w: resourceVersionMatch is forbidden unless resourceVersion is provided", ErrInvalidParam)
		case cont:
			return listVersion{}, fmt.Errorf("%w: resourceVersionMatch is forbidden when continue is provided", ErrInvalidParam)
		case match != matchExact && match != matchNotOlderThan:
			return listVersion{}, fmt.Errorf("%w: resourceVersionMatch=%q: want %q or %q", ErrInvalidParam, match, matchExact, matchNotOlderThan)
		case match == matchExact && rv == "0":
			return listVersion{}, fmt.Errorf("%w: resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"", ErrInvalidParam)
		}
	}
	if cont {
		if rv != "" && rv != "0" {
			return listVersion{}, fmt.Errorf("%w: specifying resourceVersion is not allowed when using continue "+
				"(the token carries its revision)", ErrInvalidParam)
		}
		return listVersion{sem: rvContinue}, nil
	}
	switch rv {
	case "":
		return listVersion{sem: rvMostRecent}, nil
	case "0":
		return listVersion{sem: rvAny}, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 1 {
		return listVersion{}, fmt.Errorf("%w: resourceVersion=%q is not a revision (a positive integer, or \"0\")", ErrInvalidParam, rv)
	}
	if match == matchExact || (match == "" && limited) {
		return listVersion{sem: rvExact, rev: n}, nil
	}
	return listVersion{sem: rvNotOlderThan, rev: n}, nil
}

// rawListVersion is the raw list's mapping onto the same semantics: revision=N is
// Exact unless revision_match=not_older_than; no revision is MostRecent (Any is
// consistency=serializable, which keeps its own meaning). cont says a continue token
// is given.
func rawListVersion(match RevisionMatch, rev int64, cont bool) (listVersion, error) {
	switch {
	case match == MatchUnset:
	case rev == 0:
		return listVersion{}, fmt.Errorf("%w: %s needs %s=N", ErrInvalidParam, api.ParamRevisionMatch, api.ParamRevision)
	case cont:
		return listVersion{}, fmt.Errorf("%w: %s is forbidden with continue (the token carries its revision)",
			ErrInvalidParam, api.ParamRevisionMatch)
	}
	switch {
	case cont:
		return listVersion{sem: rvContinue}, nil
	case rev == 0:
		return listVersion{sem: rvMostRecent}, nil
	case match == MatchNotOlderThan:
		return listVersion{sem: rvNotOlderThan, rev: rev}, nil
	}
	return listVersion{sem: rvExact, rev: rev}, nil
}

// resolveVersion fixes req's revision for v. MostRecent and Continue keep req as it is
// (req.cons decides MostRecent's freshness); Any reads the node's applied state.
// NotOlderThan and Exact first make sure the cluster has reached N, reading the node's
// local state when it has (no round trip) and a linearizable view otherwise; a
// revision beyond the cluster's is ErrTooLargeResourceVersion. Unlike Kubernetes'
// watch cache keel does not wait for it: the linearizable view already holds every
// write acknowledged so far, so N is not a revision anyone was told of.
func (s *Server) resolveVersion(ctx context.Context, req *listRequest, v listVersion) error {
	switch v.sem {
	case rvAny:
		req.cons = fsm.Serializable
		return nil
	case rvNotOlderThan, rvExact:
	default:
		return nil
	}
	view, err := s.viewAt(ctx, fsm.Linearizable, v.rev)
	if err != nil {
		return err
	}
	if view.Revision() < v.rev {
		return fmt.Errorf("%w: Too large resource version: %d, current: %d", ErrTooLargeResourceVersion, v.rev, view.Revision())
	}
	req.rev, req.cons = v.rev, fsm.Serializable
	if v.sem == rvNotOlderThan {
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
