package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// PathAPIs is the root of the resource API.
const PathAPIs = "/apis"

func (s *Server) apiRoutes() {
	s.route(PathAPIs, map[string]handlerFunc{http.MethodGet: s.handleDiscovery})
	s.route(PathAPIs+"/{group}/{version}/{resource}", map[string]handlerFunc{http.MethodGet: s.handleObjectList})
	s.route(PathAPIs+"/{group}/{version}/{resource}/{name}", map[string]handlerFunc{
		http.MethodGet:    s.handleObjectGet,
		http.MethodPut:    s.handleObjectPut,
		http.MethodDelete: s.handleObjectDelete,
	})
}

// The /apis routes only translate: each decodes its request into an kv.ObjectRef and
// options, calls the typed layer (kv.ObjectAPI, package kv/resources) and encodes what it
// returns (the typed watch's door is routes_apis_watch.go). The layer decides
// everything about objects; the core (core_resources.go) checks the rights and limits.

// objectRef is the typed object or list r's path names.
func objectRef(r *http.Request) kv.ObjectRef {
	return kv.ObjectRef{Group: r.PathValue("group"), Version: r.PathValue("version"),
		Resource: r.PathValue("resource"), Name: r.PathValue("name")}
}

// objects is the attached typed layer, or the 404 of a node without one.
func (s *Server) objectLayer() (kv.ObjectAPI, error) {
	o := s.core.Objects()
	if o == nil {
		return nil, fmt.Errorf("%w: no schema is loaded (start the agent with -schema FILE)", kv.ErrNoRoute)
	}
	return o, nil
}

// handleDiscovery serves GET /apis: the typed layer's discovery document
// (kv.ObjectAPI.Discovery); an empty list on a node without a schema.
func (s *Server) handleDiscovery(w http.ResponseWriter, r *http.Request) error {
	o := s.core.Objects()
	if o == nil || s.core.Resources() == nil {
		writeJSON(w, http.StatusOK, map[string]any{"resources": []any{}})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"resources": o.Discovery()})
	return nil
}

func (s *Server) handleObjectGet(w http.ResponseWriter, r *http.Request) error {
	o, err := s.objectLayer()
	if err != nil {
		return err
	}
	p, err := parseParams(r, "consistency")
	if err != nil {
		return err
	}
	cons, err := p.consistency()
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	obj, err := o.Get(ctx, CallerOf(r), objectRef(r), cons)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, obj)
	return nil
}

// handleObjectPut serves PUT /apis/{group}/{version}/{resource}/{name}: create (201)
// or replace (200) the object (kv.ObjectAPI.Put); ?force=true accepts a lossy write.
func (s *Server) handleObjectPut(w http.ResponseWriter, r *http.Request) error {
	o, err := s.objectLayer()
	if err != nil {
		return err
	}
	p, err := parseParams(r, "force")
	if err != nil {
		return err
	}
	force, err := p.bool("force")
	if err != nil {
		return err
	}
	body, err := readBody(w, r, s.cfg.MaxValueBytes, "object")
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	out, created, err := o.Put(ctx, CallerOf(r), objectRef(r), body, force)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, out)
	return nil
}

// handleObjectDelete serves DELETE .../{name}; ?revision=N makes it conditional.
func (s *Server) handleObjectDelete(w http.ResponseWriter, r *http.Request) error {
	o, err := s.objectLayer()
	if err != nil {
		return err
	}
	p, err := parseParams(r, "revision")
	if err != nil {
		return err
	}
	rev, err := p.int64("revision", 1, 0)
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	at, err := o.Delete(ctx, CallerOf(r), objectRef(r), rev)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"revision": at})
	return nil
}

// handleObjectList serves GET /apis/{group}/{version}/{resource}: the objects at one
// revision, converted to the requested version (kv.ObjectAPI.List: pages with ?limit=
// and continue tokens, Kubernetes' resourceVersion and resourceVersionMatch). With
// ?watch=true it is a watch of the resource instead (handleObjectWatch).
func (s *Server) handleObjectList(w http.ResponseWriter, r *http.Request) error {
	o, err := s.objectLayer()
	if err != nil {
		return err
	}
	p, err := parseParams(r, "watch", "limit", "continue", "consistency", "resourceVersion",
		"resourceVersionMatch", "allowWatchBookmarks", "progress", api.ParamRequireLeader)
	if err != nil {
		return err
	}
	if watch, err := p.bool("watch"); err != nil || watch {
		if err != nil {
			return err
		}
		if p.has("resourceVersionMatch") {
			return fmt.Errorf("%w: resourceVersionMatch is a parameter of lists, not of watch=true", kv.ErrInvalidParam)
		}
		return s.handleObjectWatch(w, r, o)
	}
	if p.has(api.ParamRequireLeader) {
		return fmt.Errorf("%w: %s is a parameter of watch=true, not of lists", kv.ErrInvalidParam, api.ParamRequireLeader)
	}
	opts, err := objectListOptions(p)
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	l, err := o.List(ctx, CallerOf(r), objectRef(r), opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, objectListBody(l))
	return nil
}

// objectListOptions decodes a typed list's parameters.
func objectListOptions(p params) (kv.ObjectListOptions, error) {
	for _, name := range []string{"allowWatchBookmarks", "progress"} {
		if p.has(name) {
			return kv.ObjectListOptions{}, fmt.Errorf("%w: %s is a parameter of watch=true", kv.ErrInvalidParam, name)
		}
	}
	limit, err := p.int64("limit", 0, 0) // 0, as in Kubernetes, is no limit
	if err != nil {
		return kv.ObjectListOptions{}, err
	}
	opts := kv.ObjectListOptions{Limit: limit, Continue: p.get("continue"), HasContinue: p.has("continue"),
		ResourceVersion: p.get("resourceVersion"), ResourceVersionMatch: p.get("resourceVersionMatch"),
		HasConsistency: p.has("consistency")}
	if opts.Consistency, err = p.consistency(); err != nil {
		return kv.ObjectListOptions{}, err
	}
	return opts, nil
}

// objectListBody is the JSON of a typed list: its items, those it could not present
// in errors (each with the status its error maps to), and the list metadata
// (revision, the same as resourceVersion; continue; remainingItemCount with continue).
func objectListBody(l *kv.ObjectList) map[string]any {
	meta := map[string]any{"revision": l.Revision, "resourceVersion": strconv.FormatInt(l.Revision, 10)}
	if l.Continue != "" {
		meta["continue"] = l.Continue
	}
	if l.Remaining >= 0 {
		meta["remainingItemCount"] = l.Remaining
	}
	out := map[string]any{"apiVersion": l.APIVersion, "kind": "List", "metadata": meta, "items": l.Items}
	if len(l.Failed) > 0 {
		failed := make([]itemError, 0, len(l.Failed))
		for _, f := range l.Failed {
			e := kv.WireError(f.Err, false)
			failed = append(failed, itemError{Name: f.Name, Revision: f.Revision, Code: e.Code, Reason: e.Reason, Message: e.Message})
		}
		out["errors"] = failed
	}
	return out
}

// itemError is a list's report of one object it cannot present (stored in a version
// this node cannot decode, garbled, or not convertible to the list's version): the
// list still answers with every other object.
type itemError struct {
	Name     string `json:"name"`
	Revision int64  `json:"revision"`
	Code     int    `json:"code"`
	Reason   string `json:"reason"`
	Message  string `json:"message"`
}
