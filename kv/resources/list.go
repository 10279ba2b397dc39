package resources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
)

// Values of the typed list's resourceVersionMatch (Kubernetes' spelling).
const (
	matchExact        = "Exact"
	matchNotOlderThan = "NotOlderThan"
)

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
func parseListVersion(rv, match string, limited, cont bool) (kv.ListVersion, error) {
	if match != "" {
		switch {
		case rv == "":
			return kv.ListVersion{}, fmt.Errorf("%w: resourceVersionMatch is forbidden unless resourceVersion is provided", kv.ErrInvalidParam)
		case cont:
			return kv.ListVersion{}, fmt.Errorf("%w: resourceVersionMatch is forbidden when continue is provided", kv.ErrInvalidParam)
		case match != matchExact && match != matchNotOlderThan:
			return kv.ListVersion{}, fmt.Errorf("%w: resourceVersionMatch=%q: want %q or %q", kv.ErrInvalidParam, match, matchExact, matchNotOlderThan)
		case match == matchExact && rv == "0":
			return kv.ListVersion{}, fmt.Errorf("%w: resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"", kv.ErrInvalidParam)
		}
	}
	if cont {
		if rv != "" && rv != "0" {
			return kv.ListVersion{}, fmt.Errorf("%w: specifying resourceVersion is not allowed when using continue "+
				"(the token carries its revision)", kv.ErrInvalidParam)
		}
		return kv.ListVersion{Semantics: kv.ListContinue}, nil
	}
	switch rv {
	case "":
		return kv.ListVersion{Semantics: kv.ListMostRecent}, nil
	case "0":
		return kv.ListVersion{Semantics: kv.ListAny}, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 1 {
		return kv.ListVersion{}, fmt.Errorf("%w: resourceVersion=%q is not a revision (a positive integer, or \"0\")", kv.ErrInvalidParam, rv)
	}
	if match == matchExact || (match == "" && limited) {
		return kv.ListVersion{Semantics: kv.ListExact, Revision: n}, nil
	}
	return kv.ListVersion{Semantics: kv.ListNotOlderThan, Revision: n}, nil
}

// List returns ref's objects at one revision, in ref's version. With opts.Limit it is
// one page with a continue token any node accepts (the core's tokens and guarantees);
// without, the whole list or kv.ErrListTooLarge. opts.ResourceVersion and
// ResourceVersionMatch choose the revision as Kubernetes does (parseListVersion); a
// compacted one is fsm.ErrCompacted worded "too old resource version". Objects that
// cannot be presented are in ObjectList.Failed; the others are still listed.
func (l *Layer) List(ctx context.Context, c kv.Caller, ref kv.ObjectRef, opts kv.ObjectListOptions) (*kv.ObjectList, error) {
	q, err := l.authorize(c, ref, false, false)
	if err != nil {
		return nil, err
	}
	if err := q.res.ReadCheck(q.r.Key()); err != nil {
		return nil, err
	}
	req, isNew, err := l.listRequest(ctx, c, q, opts)
	if err != nil {
		return nil, err
	}
	pg, err := l.core.ResourceList(ctx, c, req)
	if err != nil {
		if errors.Is(err, fsm.ErrCompacted) {
			return nil, fmt.Errorf("too old resource version: %w", err)
		}
		return nil, err
	}
	if pg.KVs, err = l.overlay(ctx, c, q, pg.KVs, pg.Revision, isNew); err != nil {
		return nil, err
	}
	return objectList(q, pg), nil
}

// listRequest validates a typed list's options and fixes its revision choice and
// range (and whether that is a key migration's new range).
func (l *Layer) listRequest(ctx context.Context, c kv.Caller, q request, opts kv.ObjectListOptions) (kv.ResourceListRequest, bool, error) {
	if opts.Limit < 0 {
		return kv.ResourceListRequest{}, false, fmt.Errorf("%w: limit=%d: want a non-negative integer", kv.ErrInvalidParam, opts.Limit)
	}
	if opts.HasContinue && opts.Continue == "" {
		return kv.ResourceListRequest{}, false, fmt.Errorf("%w: continue is empty", kv.ErrInvalidParam)
	}
	v, err := parseListVersion(opts.ResourceVersion, opts.ResourceVersionMatch, opts.Limit > 0, opts.Continue != "")
	if err != nil {
		return kv.ResourceListRequest{}, false, err
	}
	prefix, isNew, err := l.listRange(ctx, c, q, opts.Continue)
	if err != nil {
		return kv.ResourceListRequest{}, false, err
	}
	if v.Semantics == kv.ListAny && opts.HasConsistency {
		v.Semantics = kv.ListMostRecent // an explicit consistency= says how fresh "any" must be
	}
	return kv.ResourceListRequest{Group: q.r.Group, Resource: q.r.Name, Prefix: prefix, Limit: opts.Limit,
		Token: opts.Continue, Consistency: opts.Consistency, Version: v}, isNew, nil
}

// objectList presents every object of pg in q's version; those that cannot be are
// reported in Failed.
func objectList(q request, pg kv.ResourcePage) *kv.ObjectList {
	prefix := []byte(q.r.Prefix)
	out := &kv.ObjectList{APIVersion: q.apiVersion(), Items: make([]map[string]any, 0, len(pg.KVs)),
		Revision: pg.Revision, Continue: pg.Continue, Remaining: pg.Remaining}
	enc := q.readEncoding()
	for _, item := range pg.KVs {
		obj, err := q.r.Present(item, q.version, enc)
		if err != nil {
			out.Failed = append(out.Failed, kv.ObjectError{Name: string(bytes.TrimPrefix(item.Key, prefix)),
				Revision: item.ModRevision, Err: err})
			continue
		}
		out.Items = append(out.Items, obj)
	}
	return out
}
