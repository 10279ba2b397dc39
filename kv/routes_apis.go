package kv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/jsonutf8"
	"github.com/keel-kv/keel/versions"
)

// Resources is what the resource API needs from the node's storage-version manager;
// *versions.Manager satisfies it.
type Resources interface {
	Schema() *versions.Schema
	// WriteEncoding is the version writes to resource must be stored in, or why
	// writes must wait (versions.ErrNotRegistered, ErrNoCommonEncoding, ErrUndecodable).
	WriteEncoding(resource string) (string, error)
	// ReadCheck fails when stored objects of resource cannot be decoded here.
	ReadCheck(resource string) error
}

var _ Resources = (*versions.Manager)(nil)

// SetResources turns on the resource API (/apis) over res. Call before serving.
func (s *Server) SetResources(res Resources) { s.resources.Store(&res) }

// PathAPIs is the root of the resource API.
const PathAPIs = "/apis"

// namePattern is a DNS subdomain, as Kubernetes names objects.
var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

func (s *Server) apiRoutes() {
	s.route(PathAPIs, map[string]handlerFunc{http.MethodGet: s.handleDiscovery})
	s.route(PathAPIs+"/{group}/{version}/{resource}", map[string]handlerFunc{http.MethodGet: s.handleObjectList})
	s.route(PathAPIs+"/{group}/{version}/{resource}/{name}", map[string]handlerFunc{
		http.MethodGet:    s.handleObjectGet,
		http.MethodPut:    s.handleObjectPut,
		http.MethodDelete: s.handleObjectDelete,
	})
}

// resourceReq is a validated resource request: which resource, in which version.
type resourceReq struct {
	res     Resources
	r       *versions.Resource
	version string
	name    string
}

func (q resourceReq) key() []byte        { return []byte(q.r.Prefix + q.name) }
func (q resourceReq) apiVersion() string { return q.r.Group + "/" + q.version }

func (s *Server) resourceRequest(r *http.Request, named bool) (resourceReq, error) {
	p := s.resources.Load()
	if p == nil {
		return resourceReq{}, fmt.Errorf("%w: no schema is loaded (start the agent with -schema FILE)", ErrNoRoute)
	}
	q := resourceReq{res: *p, version: r.PathValue("version"), name: r.PathValue("name")}
	group, name := r.PathValue("group"), r.PathValue("resource")
	q.r = q.res.Schema().Lookup(group, name)
	if q.r == nil {
		return q, fmt.Errorf("%w: no resource %s/%s in this node's schema", ErrNoRoute, group, name)
	}
	if !slices.Contains(q.r.Served(), q.version) {
		return q, fmt.Errorf("%w: resource %s is not served in version %q here (served: %v)",
			ErrNoRoute, q.r.Key(), q.version, q.r.Served())
	}
	if named && !namePattern.MatchString(q.name) {
		return q, fmt.Errorf("%w: name %q: want a DNS subdomain (lowercase letters, digits, '-', '.')",
			ErrInvalidKey, q.name)
	}
	return q, nil
}

// handleDiscovery serves GET /apis: every resource with its versions and, as in
// KEP-2339's discovery document, a hash of the version this node stores it in (equal
// hashes on every node = the cluster agrees).
func (s *Server) handleDiscovery(w http.ResponseWriter, r *http.Request) error {
	p := s.resources.Load()
	if p == nil {
		writeJSON(w, http.StatusOK, map[string]any{"resources": []any{}})
		return nil
	}
	type version struct {
		Name   string `json:"name"`
		Served bool   `json:"served"`
	}
	type resource struct {
		Group              string    `json:"group"`
		Name               string    `json:"name"`
		Prefix             string    `json:"prefix"`
		Versions           []version `json:"versions"`
		PreferredVersion   string    `json:"preferredVersion"`
		StorageVersion     string    `json:"storageVersion,omitempty"`
		StorageVersionHash string    `json:"storageVersionHash,omitempty"`
		WritesBlocked      string    `json:"writesBlocked,omitempty"`
	}
	var out []resource
	for _, rs := range (*p).Schema().Resources {
		d := resource{Group: rs.Group, Name: rs.Name, Prefix: rs.Prefix, PreferredVersion: rs.Preferred}
		for _, v := range rs.Versions {
			d.Versions = append(d.Versions, version{v.Name, v.Served})
		}
		if enc, err := (*p).WriteEncoding(rs.Key()); err == nil {
			d.StorageVersion = enc
			sum := sha256.Sum256([]byte(versions.EncodingTag(rs.Key(), enc)))
			d.StorageVersionHash = base64.StdEncoding.EncodeToString(sum[:8])
		} else {
			d.WritesBlocked = err.Error()
		}
		out = append(out, d)
	}
	writeJSON(w, http.StatusOK, map[string]any{"resources": out})
	return nil
}

// present decodes a stored object and converts it to the requested version
// (versions.Resource.View: defaults filled in, metadata.downgraded set when a write
// back through that version could not keep what it hides, given enc, the version
// writes are stored in now; "" = the object's own), with metadata.revision set to its
// mod revision.
func present(q resourceReq, kv fsm.KeyValue, enc string) (map[string]any, error) {
	from := q.r.StoredVersion(kv)
	if !q.r.HasVersion(from) {
		return nil, fmt.Errorf("%w: %s %q is stored in version %s, which this node's schema cannot decode",
			versions.ErrUndecodable, q.r.Key(), bytes.TrimPrefix(kv.Key, []byte(q.r.Prefix)), from)
	}
	obj, err := versions.DecodeObject(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("stored object %q: %w", kv.Key, err)
	}
	if enc == "" {
		enc = from
	}
	out, _, err := q.r.View(obj, from, q.version, enc)
	if err != nil {
		return nil, fmt.Errorf("stored object %q: %w", kv.Key, err)
	}
	meta, _ := out["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		out["metadata"] = meta
	}
	meta["revision"] = kv.ModRevision
	return out, nil
}

// readEncoding is the version a write back would be stored in now, for marking
// downgraded views; "" when writes are blocked (each object's own version is assumed).
func (q resourceReq) readEncoding() string {
	enc, err := q.res.WriteEncoding(q.r.Key())
	if err != nil {
		return ""
	}
	return enc
}

func (s *Server) handleObjectGet(w http.ResponseWriter, r *http.Request) error {
	q, err := s.resourceRequest(r, true)
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
	if err := q.res.ReadCheck(q.r.Key()); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	view, err := s.viewAt(ctx, cons, 0)
	if err != nil {
		return err
	}
	ks, err := keyStateAt(view, q, 0)
	if err != nil {
		return err
	}
	l, err := ks.locate(view, q, 0)
	if err != nil {
		return err
	}
	if !l.found {
		return fmt.Errorf("%s %q: %w", q.r.Key(), q.name, fsm.ErrKeyNotFound)
	}
	obj, err := present(q, l.cur, q.readEncoding())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, obj)
	return nil
}

// handleObjectPut serves PUT /apis/{group}/{version}/{resource}/{name}: create or
// replace the object. A metadata.revision > 0 makes it a compare-and-swap (409 when the
// object changed since). The object is prepared by versions.Resource.PrepareWrite:
// defaulted, refused (400, naming the field) unless it reads in every served version,
// converted to this node's effective encoding version, with the fields its version
// cannot see carried over from the stored object. A write that would lose values is
// 409 Downgraded unless ?force=true. The response is what was stored, in the request's
// version.
func (s *Server) handleObjectPut(w http.ResponseWriter, r *http.Request) error {
	q, err := s.resourceRequest(r, true)
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
	obj, rev, marked, err := validateObject(q, body)
	if err != nil {
		return err
	}
	if marked && !force {
		return fmt.Errorf("%w: %s %q: the body is marked metadata.downgraded: it was read through %s, which "+
			"cannot hold all of the stored object, and writing it back would lose the rest; "+
			"write through a version that holds it, or add ?force=true to accept the loss",
			ErrDowngraded, q.r.Key(), q.name, q.apiVersion())
	}
	enc, err := q.res.WriteEncoding(q.r.Key())
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	var res *putResult
	for attempt := 0; ; attempt++ {
		res, err = s.putObject(ctx, q, obj, rev, enc, force)
		// A blind write (no metadata.revision) raced another write between reading
		// the object it carries over from and storing, or a key migration's phase
		// moved in between: read again.
		retry := errors.Is(err, errPhaseChanged) || (errors.Is(err, errObjectChanged) && rev == 0)
		if !retry || attempt == maxPutAttempts-1 {
			break
		}
	}
	if errors.Is(err, errObjectChanged) || errors.Is(err, errPhaseChanged) {
		return fmt.Errorf("%w: %s %q changed %d times while it was being written; try again",
			ErrConflict, q.r.Key(), q.name, maxPutAttempts)
	}
	if err != nil {
		return err
	}
	out, err := present(q, res.kv, enc)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if res.created {
		code = http.StatusCreated
	}
	writeJSON(w, code, out)
	return nil
}

// putResult is what a typed put stored, as the phase reads it back.
type putResult struct {
	kv      fsm.KeyValue
	created bool
}

// maxPutAttempts bounds the read-prepare-write rounds of a blind PUT under contention.
const maxPutAttempts = 5

// errObjectChanged: the stored object changed between putObject's read and its write.
var errObjectChanged = errors.New("kv: object changed during the write")

// putObject stores obj (in q.version; rev > 0: only over that mod revision) in
// encoding enc, carrying over from the object stored now. The write is guarded on the
// mod revision of the object it carried over from (absent: create only), so what it
// carried is never stale; a lost race is errObjectChanged when rev == 0 and
// ErrConflict otherwise.
func (s *Server) putObject(ctx context.Context, q resourceReq, obj map[string]any, rev int64, enc string, force bool) (*putResult, error) {
	view, err := s.viewAt(ctx, fsm.Linearizable, 0)
	if err != nil {
		return nil, err
	}
	ks, err := keyStateAt(view, q, 0)
	if err != nil {
		return nil, err
	}
	l, err := ks.locate(view, q, 0)
	if err != nil {
		return nil, err
	}
	var stored map[string]any
	var sv string
	if l.found {
		if sv = q.r.StoredVersion(l.cur); !q.r.HasVersion(sv) {
			return nil, fmt.Errorf("%w: %s %q is stored in version %s, which this node's schema cannot decode; "+
				"write it through a node that can", versions.ErrUndecodable, q.r.Key(), q.name, sv)
		}
		stored, _ = versions.DecodeObject(l.cur.Value) // a garbled object is replaced, not carried over
	}
	if rev > 0 && !ks.matches(l, rev) {
		return nil, fmt.Errorf("%w: %s %q: revision %d is not the object's current revision",
			ErrConflict, q.r.Key(), q.name, rev)
	}
	prep, err := q.r.PrepareWrite(obj, q.version, stored, sv, enc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	if prep.Loses() && !force {
		return nil, lossError(q, enc, prep)
	}
	value, err := json.Marshal(prep.Object)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidBody, err)
	}
	if err := s.lim.checkValue(len(value)); err != nil {
		return nil, err
	}
	ops, err := ks.writeOps(q, value, versions.EncodingTag(q.r.Key(), enc))
	if err != nil {
		return nil, err
	}
	txn := &fsm.Txn{Success: ops}
	ks.guard(txn, q, l)
	res, err := s.apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
	if err != nil {
		return nil, fmt.Errorf("put %s %q: %w", q.r.Key(), q.name, err)
	}
	if !res.Succeeded {
		if err := s.phaseMoved(ctx, q, ks); err != nil {
			return nil, err
		}
		if rev > 0 {
			return nil, fmt.Errorf("%w: %s %q: revision %d is not the object's current revision",
				ErrConflict, q.r.Key(), q.name, rev)
		}
		return nil, errObjectChanged
	}
	kv, err := ks.readBack(q, res.Responses[len(res.Responses)-1].KVs[0])
	if err != nil {
		return nil, err
	}
	return &putResult{kv: kv, created: !l.found}, nil
}

// lossError is the 409 Downgraded of a write that would lose values.
func lossError(q resourceReq, enc string, prep *versions.Write) error {
	var why []string
	if len(prep.Lost) > 0 {
		why = append(why, fmt.Sprintf("%s/%s, the version %s is written in now, cannot hold the values of %v",
			q.r.Group, enc, q.r.Key(), prep.Lost))
	}
	if len(prep.Downgraded) > 0 {
		why = append(why, fmt.Sprintf("the stored object holds values of %v that %s cannot see and that cannot be kept",
			prep.Downgraded, q.apiVersion()))
	}
	if h, ok := q.res.(interface{ HeldBack(string) string }); ok && len(prep.Lost) > 0 {
		if held := h.HeldBack(q.r.Key()); held != "" {
			why = append(why, held) // the stored objects may be newer: say who holds writes back
		}
	}
	return fmt.Errorf("%w: %s %q: %s; nothing written (add ?force=true to accept the loss)",
		ErrDowngraded, q.r.Key(), q.name, strings.Join(why, "; and "))
}

// validateObject checks a PUT body: a JSON object whose apiVersion (if set) is the
// path's, whose metadata.name (if set) is the path's name, whose metadata.revision
// (if set) is a non-negative integer and whose metadata.downgraded (if set) is a
// boolean. It returns the object without those two server-set fields, and whether it
// was marked downgraded.
func validateObject(q resourceReq, body []byte) (map[string]any, int64, bool, error) {
	obj, rev, err := validateObjectMeta(q, body)
	if err != nil {
		return nil, 0, false, err
	}
	meta := obj["metadata"].(map[string]any)
	d, ok := meta["downgraded"]
	if !ok {
		return obj, rev, false, nil
	}
	marked, isBool := d.(bool)
	if !isBool {
		return nil, 0, false, fmt.Errorf("%w: metadata.downgraded %v is not a boolean", ErrInvalidBody, d)
	}
	delete(meta, "downgraded")
	return obj, rev, marked, nil
}

// validateObjectMeta is validateObject up to metadata.revision.
func validateObjectMeta(q resourceReq, body []byte) (map[string]any, int64, error) {
	if err := jsonutf8.Check(body); err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	obj, err := versions.DecodeObject(body)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	if av, ok := obj["apiVersion"]; ok && av != q.apiVersion() {
		return nil, 0, fmt.Errorf("%w: apiVersion %v does not match the path's %s", ErrInvalidBody, av, q.apiVersion())
	}
	obj["apiVersion"] = q.apiVersion()
	meta := map[string]any{}
	if m, ok := obj["metadata"]; ok {
		if meta, ok = m.(map[string]any); !ok {
			return nil, 0, fmt.Errorf("%w: metadata is not an object", ErrInvalidBody)
		}
	}
	if n, ok := meta["name"]; ok && n != q.name {
		return nil, 0, fmt.Errorf("%w: metadata.name %v does not match the path's name %q", ErrInvalidBody, n, q.name)
	}
	meta["name"] = q.name
	var rev int64
	if rv, ok := meta["revision"]; ok {
		n, isNum := rv.(json.Number)
		v, err := strconv.ParseInt(string(n), 10, 64)
		if !isNum || err != nil || v < 0 {
			return nil, 0, fmt.Errorf("%w: metadata.revision %v is not a non-negative integer", ErrInvalidBody, rv)
		}
		rev = v
		delete(meta, "revision")
	}
	obj["metadata"] = meta
	return obj, rev, nil
}

// applyObject applies ops to q's object as one transaction, guarded by the object's
// mod revision when rev > 0 (a stale rev is ErrConflict).
func (s *Server) applyObject(r *http.Request, q resourceReq, what string, rev int64, ops ...fsm.Op) (*fsm.Result, error) {
	txn := &fsm.Txn{Success: ops}
	if rev > 0 {
		guardModRevision(txn, string(q.key()), rev)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := s.apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
	if err != nil {
		return nil, fmt.Errorf("%s %s %q: %w", what, q.r.Key(), q.name, err)
	}
	if !res.Succeeded {
		return nil, fmt.Errorf("%w: %s %q: revision %d is not the object's current revision",
			ErrConflict, q.r.Key(), q.name, rev)
	}
	return res, nil
}

// handleObjectDelete serves DELETE .../{name}; ?revision=N makes it conditional.
func (s *Server) handleObjectDelete(w http.ResponseWriter, r *http.Request) error {
	q, err := s.resourceRequest(r, true)
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
	if _, err := q.res.WriteEncoding(q.r.Key()); errors.Is(err, versions.ErrNotRegistered) {
		return err
	}
	if q.r.KeyMigration == nil {
		res, err := s.applyObject(r, q, "delete", rev, fsm.Op{Type: fsm.OpDelete, Key: q.key()})
		if err != nil {
			return err
		}
		if res.Responses[0].Deleted == 0 {
			return fmt.Errorf("%s %q: %w", q.r.Key(), q.name, fsm.ErrKeyNotFound)
		}
		writeJSON(w, http.StatusOK, map[string]any{"revision": res.Revision})
		return nil
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	var at int64
	for attempt := 0; ; attempt++ {
		at, err = s.deleteObject(ctx, q, rev)
		retry := errors.Is(err, errPhaseChanged) || (errors.Is(err, errObjectChanged) && rev == 0)
		if !retry || attempt == maxPutAttempts-1 {
			break
		}
	}
	if errors.Is(err, errObjectChanged) && rev > 0 {
		return fmt.Errorf("%w: %s %q: revision %d is not the object's current revision",
			ErrConflict, q.r.Key(), q.name, rev)
	}
	if errors.Is(err, errObjectChanged) || errors.Is(err, errPhaseChanged) {
		return fmt.Errorf("%w: %s %q changed %d times while it was being deleted; try again",
			ErrConflict, q.r.Key(), q.name, maxPutAttempts)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"revision": at})
	return nil
}

// handleObjectList serves GET /apis/{group}/{version}/{resource}: the objects at one
// revision, converted to the requested version. With ?limit= it is one page with a
// continue token that any node accepts (the KV list's tokens and guarantees); without,
// the whole list or 413 ListTooLarge. resourceVersion and resourceVersionMatch choose
// the revision as Kubernetes does (parseListVersion). With ?watch=true it is a watch
// of the resource instead (handleObjectWatch).
func (s *Server) handleObjectList(w http.ResponseWriter, r *http.Request) error {
	q, err := s.resourceRequest(r, false)
	if err != nil {
		return err
	}
	p, err := parseParams(r, "watch", "limit", "continue", "consistency", "resourceVersion",
		"resourceVersionMatch", "allowWatchBookmarks", "progress")
	if err != nil {
		return err
	}
	if watch, err := p.bool("watch"); err != nil || watch {
		if err != nil {
			return err
		}
		if p.has("resourceVersionMatch") {
			return fmt.Errorf("%w: resourceVersionMatch is a parameter of lists, not of watch=true", ErrInvalidParam)
		}
		return s.handleObjectWatch(w, r, q)
	}
	if err := q.res.ReadCheck(q.r.Key()); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	req, err := s.objectListRequest(ctx, q, p)
	if err != nil {
		return err
	}
	pg := listPage{remaining: -1}
	if req.limit == 0 {
		pg.kvs, pg.rev, err = s.scanAll(ctx, req.listRequest)
	} else {
		pg, err = s.scan(ctx, req.listRequest)
	}
	if err != nil {
		return objectListError(err)
	}
	if pg.kvs, err = s.overlay(ctx, q, pg.kvs, pg.rev, req.isNew); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, objectList(q, pg))
	return nil
}

// objectListReq is a typed list's scan and which of a key migration's ranges it reads.
type objectListReq struct {
	listRequest
	isNew bool
}

// objectListRequest validates a typed list's parameters and fixes its revision.
func (s *Server) objectListRequest(ctx context.Context, q resourceReq, p params) (objectListReq, error) {
	for _, name := range []string{"allowWatchBookmarks", "progress"} {
		if p.has(name) {
			return objectListReq{}, fmt.Errorf("%w: %s is a parameter of watch=true", ErrInvalidParam, name)
		}
	}
	limit, err := p.int64("limit", 0, 0) // 0, as in Kubernetes, is no limit
	if err != nil {
		return objectListReq{}, err
	}
	token := p.get("continue")
	if p.has("continue") && token == "" {
		return objectListReq{}, fmt.Errorf("%w: continue is empty", ErrInvalidParam)
	}
	v, err := parseListVersion(p.get("resourceVersion"), p.get("resourceVersionMatch"), limit > 0, token != "")
	if err != nil {
		return objectListReq{}, err
	}
	prefix, isNew, err := s.listRange(ctx, q, token)
	if err != nil {
		return objectListReq{}, err
	}
	req := objectListReq{isNew: isNew, listRequest: listRequest{start: prefix, end: fsm.PrefixEnd(prefix),
		token: token, limit: int(min(limit, int64(s.cfg.MaxListLimit))), count: limit > 0}}
	if req.cons, err = p.consistency(); err != nil {
		return objectListReq{}, err
	}
	if v.sem == rvAny && p.has("consistency") {
		v.sem = rvMostRecent // an explicit consistency= says how fresh "any" must be
	}
	return req, s.resolveVersion(ctx, &req.listRequest, v)
}

// objectListError words a scan's revision errors as Kubernetes does: a compacted
// revision is a 410 "too old resource version".
func objectListError(err error) error {
	if errors.Is(err, fsm.ErrCompacted) {
		return fmt.Errorf("too old resource version: %w", err)
	}
	return err
}

// objectList is the answer of a typed list: every object of pg presented in q's
// version, those that cannot be in errors, and the list metadata (revision, the same
// as resourceVersion; continue; remainingItemCount when known).
func objectList(q resourceReq, pg listPage) map[string]any {
	prefix := []byte(q.r.Prefix)
	items := make([]map[string]any, 0, len(pg.kvs))
	var failed []itemError
	enc := q.readEncoding()
	for _, kv := range pg.kvs {
		obj, err := present(q, kv, enc)
		if err != nil {
			e := errorBody(err, false)
			failed = append(failed, itemError{Name: string(bytes.TrimPrefix(kv.Key, prefix)),
				Revision: kv.ModRevision, Code: e.Code, Reason: e.Reason, Message: e.Message})
			continue
		}
		items = append(items, obj)
	}
	meta := map[string]any{"revision": pg.rev, "resourceVersion": strconv.FormatInt(pg.rev, 10)}
	if pg.cont != "" {
		meta["continue"] = pg.cont
	}
	if pg.remaining >= 0 {
		meta["remainingItemCount"] = pg.remaining
	}
	out := map[string]any{"apiVersion": q.apiVersion(), "kind": "List", "metadata": meta, "items": items}
	if len(failed) > 0 {
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
