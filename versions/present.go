package versions

import (
	"bytes"
	"fmt"

	"github.com/keel-kv/keel/fsm"
)

// Present decodes the stored object kv of r and converts it to version (View: defaults
// filled in, metadata.downgraded set when a write back through that version could not
// keep what it hides, given enc, the version writes are stored in now; "" = the
// object's own), with metadata.revision set to its mod revision. An object stored in a
// version this schema cannot decode is ErrUndecodable. The result is a new map; kv is
// not changed. Every reader of typed objects (get, list, watch) presents them here.
func (r *Resource) Present(kv fsm.KeyValue, version, enc string) (map[string]any, error) {
	from := r.StoredVersion(kv)
	if !r.HasVersion(from) {
		return nil, fmt.Errorf("%w: %s %q is stored in version %s, which this node's schema cannot decode",
			ErrUndecodable, r.Key(), bytes.TrimPrefix(kv.Key, []byte(r.Prefix)), from)
	}
	obj, err := DecodeObject(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("stored object %q: %w", kv.Key, err)
	}
	if enc == "" {
		enc = from
	}
	out, _, err := r.View(obj, from, version, enc)
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
