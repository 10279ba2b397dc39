package resources

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/versions"
)

// Layer is the typed resource API over one core. It keeps no state of its own: the
// schema and storage versions are the core's Resources (kv.Server.SetResources), read
// on every call. It is safe for concurrent use.
type Layer struct {
	core *kv.Server
}

var _ kv.ObjectAPI = (*Layer)(nil)

// New returns the typed layer over core.
func New(core *kv.Server) *Layer { return &Layer{core: core} }

// Attach turns on the typed API of core over res (the node's storage-version
// manager): core.SetResources(res) and the layer serving /apis. Call before serving.
func Attach(core *kv.Server, res kv.Resources) *Layer {
	l := New(core)
	core.SetResources(res)
	core.SetObjectAPI(l)
	return l
}

// namePattern is a DNS subdomain, as Kubernetes names objects.
var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// request is a resolved typed request: which resource, in which version, which name.
type request struct {
	res     kv.Resources
	r       *versions.Resource
	version string
	name    string
}

func (q request) key() []byte        { return []byte(q.r.Prefix + q.name) }
func (q request) apiVersion() string { return q.r.Group + "/" + q.version }

// authorize resolves ref (resolve) and checks c's read (write: change) right on its
// resource before the layer looks at anything else, so that a caller without the right
// learns nothing of the request's other faults. The core checks the right again on
// every read and write it serves.
func (l *Layer) authorize(c kv.Caller, ref kv.ObjectRef, named, write bool) (request, error) {
	if err := l.core.ResourceRight(c, ref.Group, ref.Resource, write); err != nil {
		return request{}, err
	}
	return l.resolve(ref, named)
}

// resolve looks ref up in the node's schema: kv.ErrNoRoute for a resource or version
// not served here, kv.ErrInvalidKey for a name (when named) that is not a DNS
// subdomain.
func (l *Layer) resolve(ref kv.ObjectRef, named bool) (request, error) {
	res := l.core.Resources()
	if res == nil {
		return request{}, fmt.Errorf("%w: no schema is loaded (start the agent with -schema FILE)", kv.ErrNoRoute)
	}
	q := request{res: res, version: ref.Version, name: ref.Name}
	q.r = res.Schema().Lookup(ref.Group, ref.Resource)
	if q.r == nil {
		return q, fmt.Errorf("%w: no resource %s/%s in this node's schema", kv.ErrNoRoute, ref.Group, ref.Resource)
	}
	if !slices.Contains(q.r.Served(), q.version) {
		return q, fmt.Errorf("%w: resource %s is not served in version %q here (served: %v)",
			kv.ErrNoRoute, q.r.Key(), q.version, q.r.Served())
	}
	if named && !namePattern.MatchString(q.name) {
		return q, fmt.Errorf("%w: name %q: want a DNS subdomain (lowercase letters, digits, '-', '.')",
			kv.ErrInvalidKey, q.name)
	}
	return q, nil
}

// readEncoding is the version a write back would be stored in now, for marking
// downgraded views; "" when writes are blocked (each object's own version is assumed).
func (q request) readEncoding() string {
	enc, err := q.res.WriteEncoding(q.r.Key())
	if err != nil {
		return ""
	}
	return enc
}

// view is a view of q's resource for c (the read right checked by the core).
func (l *Layer) view(ctx context.Context, c kv.Caller, q request, cons fsm.Consistency, rev int64) (*fsm.View, error) {
	return l.core.ResourceView(ctx, c, q.r.Group, q.r.Name, cons, rev)
}

// Get returns ref's object in ref's version as the key migration's phase reads it
// (fsm.ErrKeyNotFound when it does not exist), read with consistency cons.
func (l *Layer) Get(ctx context.Context, c kv.Caller, ref kv.ObjectRef, cons fsm.Consistency) (map[string]any, error) {
	q, err := l.authorize(c, ref, true, false)
	if err != nil {
		return nil, err
	}
	if err := q.res.ReadCheck(q.r.Key()); err != nil {
		return nil, err
	}
	view, err := l.view(ctx, c, q, cons, 0)
	if err != nil {
		return nil, err
	}
	ks, err := keyStateAt(view, q, 0)
	if err != nil {
		return nil, err
	}
	loc, err := ks.locate(view, q, 0)
	if err != nil {
		return nil, err
	}
	if !loc.found {
		return nil, fmt.Errorf("%s %q: %w", q.r.Key(), q.name, fsm.ErrKeyNotFound)
	}
	return q.r.Present(loc.cur, q.version, q.readEncoding())
}

// Discovery describes every resource of the node's schema: its versions, the version
// this node stores it in with its hash (versions.StorageVersionHash), or why writes
// to it are blocked. Nil without a schema.
func (l *Layer) Discovery() []kv.ResourceInfo {
	res := l.core.Resources()
	if res == nil {
		return nil
	}
	var out []kv.ResourceInfo
	for _, rs := range res.Schema().Resources {
		d := kv.ResourceInfo{Group: rs.Group, Name: rs.Name, Prefix: rs.Prefix, PreferredVersion: rs.Preferred}
		for _, v := range rs.Versions {
			d.Versions = append(d.Versions, kv.ResourceVersionInfo{Name: v.Name, Served: v.Served})
		}
		if enc, err := res.WriteEncoding(rs.Key()); err == nil {
			d.StorageVersion = enc
			d.StorageVersionHash = versions.StorageVersionHash(rs.Key(), enc)
		} else {
			d.WritesBlocked = err.Error()
		}
		out = append(out, d)
	}
	return out
}
