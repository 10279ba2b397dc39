package kv

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/versions"
)

// The core's side of the typed resource API. The typed layer (package kv/resources)
// speaks objects: it resolves a resource in the schema, converts between versions,
// follows key migrations and prepares writes in the storage version. It reaches the
// store only through the methods below, which check the caller's right on the
// resource (the ACL engine's resource rights), the value limit and the list bounds —
// each rule once, here. The typed keys are reserved (reserved.go): the KV API may not
// write them, these methods may and only these.

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

// ObjectRef names a typed object, or a list of them when Name is "":
// /apis/{Group}/{Version}/{Resource}[/{Name}].
type ObjectRef struct {
	Group, Version, Resource, Name string
}

// ObjectListOptions are a typed list's parameters, as the request gave them.
type ObjectListOptions struct {
	Limit                int64 // 0: no limit (the whole list, or ErrListTooLarge)
	Continue             string
	HasContinue          bool // continue= was given (an empty one is refused)
	ResourceVersion      string
	ResourceVersionMatch string
	Consistency          fsm.Consistency
	HasConsistency       bool // consistency= was given (it makes "0" mean most recent)
}

// ObjectList is one answer of a typed list: the objects presented in the list's
// version, those that could not be (each with why) and the list's revision, continue
// token and remaining item count (-1: unknown).
type ObjectList struct {
	APIVersion string
	Items      []map[string]any
	Failed     []ObjectError
	Revision   int64
	Continue   string
	Remaining  int64
}

// ObjectError is one object a list or watch cannot present (stored in a version this
// node cannot decode, garbled, not convertible): the others are still answered.
type ObjectError struct {
	Name     string
	Revision int64
	Err      error
}

// ObjectAPI is the typed layer the /apis routes call (kv/resources.Layer, attached
// with SetObjectAPI): each method takes the caller and returns objects and the
// core's typed errors; the route only decodes and encodes.
type ObjectAPI interface {
	Get(ctx context.Context, c Caller, ref ObjectRef, cons fsm.Consistency) (map[string]any, error)
	List(ctx context.Context, c Caller, ref ObjectRef, opts ObjectListOptions) (*ObjectList, error)
	// Put stores body as ref's object; created says it did not exist.
	Put(ctx context.Context, c Caller, ref ObjectRef, body []byte, force bool) (obj map[string]any, created bool, err error)
	// Delete deletes ref's object (rev > 0: only at that revision) and returns the
	// revision of the delete.
	Delete(ctx context.Context, c Caller, ref ObjectRef, rev int64) (int64, error)
	// Watch opens a typed watch of ref's resource; the door pumps it and writes the
	// events it returns.
	Watch(ctx context.Context, c Caller, ref ObjectRef, opts ObjectWatchOptions) (ObjectWatch, error)
	// Discovery describes every resource of the node's schema (nil without one).
	Discovery() []ResourceInfo
}

// ResourceInfo is one resource of the discovery document (GET /apis): its versions
// and, as in KEP-2339's, a hash of the version this node stores it in (equal hashes
// on every node = the cluster agrees), or why writes to it are blocked.
type ResourceInfo struct {
	Group              string                `json:"group"`
	Name               string                `json:"name"`
	Prefix             string                `json:"prefix"`
	Versions           []ResourceVersionInfo `json:"versions"`
	PreferredVersion   string                `json:"preferredVersion"`
	StorageVersion     string                `json:"storageVersion,omitempty"`
	StorageVersionHash string                `json:"storageVersionHash,omitempty"`
	WritesBlocked      string                `json:"writesBlocked,omitempty"`
}

// ResourceVersionInfo is one version of a ResourceInfo.
type ResourceVersionInfo struct {
	Name   string `json:"name"`
	Served bool   `json:"served"`
}

// ObjectWatchOptions are a typed watch's parameters.
type ObjectWatchOptions struct {
	// ResourceVersion R: the events after R (replayed from history; 410 once
	// compacted). 0: the objects that exist now as ADDED events, then the changes.
	ResourceVersion int64
	Consistency     fsm.Consistency // of the state the watch starts from
}

// Types of a typed watch event (Kubernetes' watch.EventType).
const (
	ObjectAdded    = "ADDED"
	ObjectModified = "MODIFIED"
	ObjectDeleted  = "DELETED"
	ObjectBookmark = "BOOKMARK"
	ObjectFailed   = "ERROR"
)

// ObjectEvent is one event of a typed watch: an object (ADDED, MODIFIED, DELETED: the
// object as it was, at the delete's revision; BOOKMARK: only metadata.revision), or,
// with Failed set, an object the watch cannot present (ERROR; the watch goes on).
type ObjectEvent struct {
	Type   string
	Object map[string]any
	Failed *ObjectError
}

// ObjectWatch is an open typed watch. The door reads Watcher (fsm's: Next, Bookmark),
// turns each batch into events with Events and each idle bookmark with Bookmark, asks
// RightsLost before each write, and ends the stream with the error either returns.
// Close ends it and gives back its watch slot. Not safe for concurrent use.
type ObjectWatch interface {
	Watcher() *fsm.Watcher
	// Revision is the revision of the state the watch started from.
	Revision() int64
	// Group and Kind name the resource, for the door's end event.
	Group() string
	Kind() string
	// Initial are the ADDED events of the objects at Revision (ResourceVersion 0).
	Initial() []ObjectEvent
	// Events are groups' events; a non-nil error ends the watch after them (a key
	// migration switched the range the watch reads: fsm.WatchError, 410).
	Events(groups []*fsm.RevisionEvents) ([]ObjectEvent, error)
	// Bookmark is the BOOKMARK event at rev, or the error that ends an idle watch.
	Bookmark(rev int64) (ObjectEvent, error)
	// RightsLost fails once the caller's token may no longer read the resource.
	RightsLost() error
	Close()
}

// SetObjectAPI makes o serve the typed routes under /apis (before serving).
func (s *Server) SetObjectAPI(o ObjectAPI) { s.objects.Store(&o) }

// Objects is the attached typed layer, nil before SetObjectAPI.
func (s *Server) Objects() ObjectAPI {
	if p := s.objects.Load(); p != nil {
		return *p
	}
	return nil
}

// Resources is the node's storage-version manager (SetResources), nil when no schema
// is loaded.
func (s *Server) Resources() Resources {
	if p := s.resources.Load(); p != nil {
		return *p
	}
	return nil
}

// ResourceRight is nil when c may read (write: change) the objects of
// group/resource, ErrForbidden otherwise.
func (s *Server) ResourceRight(c Caller, group, resource string, write bool) error {
	if c.az != nil && !c.az.Resource(group, resource, write) {
		return acl.ForbiddenResource(group, resource, write)
	}
	return nil
}

// ResourceView is a view of the store for reading group/resource's objects at rev (0:
// the latest) with consistency cons, for a caller with the read right. The view holds
// the whole state: its user (the typed layer) reads only the resource's keys and its
// key migration's phase record from it.
func (s *Server) ResourceView(ctx context.Context, c Caller, group, resource string, cons fsm.Consistency, rev int64) (*fsm.View, error) {
	if err := s.ResourceRight(c, group, resource, false); err != nil {
		return nil, err
	}
	return s.viewAt(ctx, cons, rev)
}

// ResourceListRequest is one page (or, Limit 0, the whole) of a typed list's scan of
// the keys under Prefix.
type ResourceListRequest struct {
	Group, Resource string
	Prefix          []byte
	Limit           int64 // capped at Config.MaxListLimit; 0 = everything
	Token           string
	Consistency     fsm.Consistency
	Version         ListVersion
}

// ResourcePage is what ResourceList read.
type ResourcePage struct {
	KVs       []fsm.KeyValue
	Revision  int64
	Continue  string
	Remaining int64 // -1: unknown
}

// ResourceList scans r's keys for a caller with the read right: the revision fixed by
// r.Version (resolveVersion: ErrTooLargeResourceVersion past the cluster's), pages
// resumed by continue tokens any node accepts, and a list without a limit bounded by
// Config.MaxListLimit and MaxListBytes (ErrListTooLarge).
func (s *Server) ResourceList(ctx context.Context, c Caller, r ResourceListRequest) (ResourcePage, error) {
	if err := s.ResourceRight(c, r.Group, r.Resource, false); err != nil {
		return ResourcePage{}, err
	}
	req := listRequest{start: r.Prefix, end: fsm.PrefixEnd(r.Prefix), token: r.Token, cons: r.Consistency,
		limit: int(min(r.Limit, int64(s.cfg.MaxListLimit))), count: r.Limit > 0}
	if err := s.resolveVersion(ctx, &req, r.Version); err != nil {
		return ResourcePage{}, err
	}
	pg := listPage{remaining: -1}
	var err error
	if r.Limit == 0 {
		pg.kvs, pg.rev, err = s.scanAll(ctx, req)
	} else {
		pg, err = s.scan(ctx, req)
	}
	if err != nil {
		return ResourcePage{}, err
	}
	return ResourcePage{KVs: pg.kvs, Revision: pg.rev, Continue: pg.cont, Remaining: pg.remaining}, nil
}

// ContinueStart is the start of the range a continue token was issued for
// (ErrInvalidContinueToken when it is not one of this cluster's).
func (s *Server) ContinueStart(ctx context.Context, token string) ([]byte, error) {
	codec, err := s.tokenCodec(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := codec.Decode(token)
	if err != nil {
		return nil, err
	}
	return tok.Start, nil
}

// CheckObjectSize refuses (ErrTooLarge) a stored object of n bytes beyond
// Config.MaxValueBytes.
func (s *Server) CheckObjectSize(n int) error { return s.lim.checkValue(n) }

// ResourceTxn applies txn, a write of group/resource's objects, for a caller with the
// write right. Every key it writes must be the resource's (resourcePrefixes): a write
// through the typed API never reaches beyond its resource.
func (s *Server) ResourceTxn(ctx context.Context, c Caller, group, resource string, txn *fsm.Txn) (*fsm.Result, error) {
	if err := s.ResourceRight(c, group, resource, true); err != nil {
		return nil, err
	}
	prefixes, err := s.resourcePrefixes(group, resource)
	if err != nil {
		return nil, err
	}
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, op := range ops {
			if op.Type != fsm.OpGet && !underAny(op.Key, prefixes) {
				return nil, fmt.Errorf("%w: key %q is not one of resource %s/%s's", ErrReservedPrefix, op.Key, group, resource)
			}
		}
	}
	return s.apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
}

// resourcePrefixes are the key prefixes group/resource's objects live under in the
// node's schema: its prefix, and its key migration's new one.
func (s *Server) resourcePrefixes(group, resource string) ([]string, error) {
	res := s.Resources()
	var r *versions.Resource
	if res != nil {
		r = res.Schema().Lookup(group, resource)
	}
	if r == nil {
		return nil, fmt.Errorf("%w: no resource %s/%s in this node's schema", ErrNoRoute, group, resource)
	}
	prefixes := []string{r.Prefix}
	if r.KeyMigration != nil {
		prefixes = append(prefixes, r.KeyMigration.To)
	}
	return prefixes, nil
}

// underAny reports whether key starts with one of prefixes.
func underAny(key []byte, prefixes []string) bool {
	for _, p := range prefixes {
		if len(p) > 0 && len(key) >= len(p) && string(key[:len(p)]) == p {
			return true
		}
	}
	return false
}

// ResourceWatch opens a watch of opts's range, all of one of group/resource's
// prefixes (resourcePrefixes), for a caller with the read right, taking a watch slot
// (the node's and the token's bounds, ErrTooManyWatches): closing it with the
// returned func gives the slot back.
func (s *Server) ResourceWatch(ctx context.Context, c Caller, group, resource string, opts fsm.WatchOptions) (*fsm.Watcher, func(), error) {
	if err := s.ResourceRight(c, group, resource, false); err != nil {
		return nil, nil, err
	}
	prefixes, err := s.resourcePrefixes(group, resource)
	if err != nil {
		return nil, nil, err
	}
	if !slices.Contains(prefixes, string(opts.Key)) || !bytes.Equal(opts.End, fsm.PrefixEnd(opts.Key)) {
		return nil, nil, fmt.Errorf("%w: a watch of [%q, %q) is not one of resource %s/%s's ranges",
			ErrForbidden, opts.Key, opts.End, group, resource)
	}
	release, err := s.acquireWatch(c.context(ctx))
	if err != nil {
		return nil, nil, err
	}
	opts.Buffer = s.cfg.WatchBuffer
	w, err := s.store.Watch(opts)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("watch %s/%s: %w", group, resource, err)
	}
	return w, func() { w.Close(); release() }, nil
}

// ResourceRightsLost returns, for a long-lived read of group/resource by c, a check
// that fails once c's token is deleted (ErrUnauthorized) or no longer holds the read
// right on the resource (ErrForbidden); nil when c's rights are not checked. A typed
// watch runs it before each write.
func (s *Server) ResourceRightsLost(c Caller, group, resource string) func() error {
	if c.az == nil {
		return nil
	}
	return func() error {
		cur, err := s.current(c.az)
		if err != nil {
			return err
		}
		if !cur.Resource(group, resource, false) {
			return fmt.Errorf("%w: the token no longer has the read right on resource %s/%s", ErrForbidden, group, resource)
		}
		return nil
	}
}
