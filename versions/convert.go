package versions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// DecodeObject decodes one stored or submitted object: a single JSON object, numbers
// kept exact (json.Number) so that conversions never round them. Anything else is
// ErrBadObject.
func DecodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadObject, err)
	}
	if obj == nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrBadObject)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the object", ErrBadObject)
	}
	return obj, nil
}

// Convert converts obj, a decoded JSON object, from version from to version
// to. It walks the conversion chain forward (applying each step's ops in
// order) or backward (applying the inverse ops in reverse order):
//
//   - rename a -> b moves a to b; it is a no-op when a is absent and fails with
//     ErrConversion when b already exists. Its inverse is rename b -> a.
//   - default f = v sets f to a copy of v when f is absent. Its inverse
//     deletes f.
//   - drop f deletes f. Its inverse does nothing: the data is lost.
//
// Writing a path creates missing intermediate objects; an intermediate that
// exists but is not an object is ErrConversion (for reads and deletes it
// means the field is absent).
//
// Convert never mutates obj: it works on a deep copy. It sets
// out["apiVersion"] = Group + "/" + to. from == to returns a copy unchanged
// except for apiVersion. lossy is true if a forward drop removed an existing
// field, or the walk went backward over a step containing a drop.
//
// Errors: ErrUnknownVersion if from or to is not declared; ErrBadObject if
// obj is nil, holds values that are not JSON (anything but nil, bool,
// numbers, string, map[string]any and []any), or has an apiVersion other than
// Group + "/" + from; ErrConversion if an op cannot be applied.
func (r *Resource) Convert(obj map[string]any, from, to string) (out map[string]any, lossy bool, err error) {
	fi, ti := r.index(from), r.index(to)
	if fi < 0 {
		return nil, false, fmt.Errorf("%w %q of %s", ErrUnknownVersion, from, r.Key())
	}
	if ti < 0 {
		return nil, false, fmt.Errorf("%w %q of %s", ErrUnknownVersion, to, r.Key())
	}
	if obj == nil {
		return nil, false, fmt.Errorf("%w: nil object", ErrBadObject)
	}
	if av, ok := obj["apiVersion"]; ok && av != r.Group+"/"+from {
		return nil, false, fmt.Errorf("%w: apiVersion %v, converting from %s/%s", ErrBadObject, av, r.Group, from)
	}
	cp, err := deepCopy(obj, "")
	if err != nil {
		return nil, false, err
	}
	out = cp.(map[string]any)
	for i := fi; i < ti; i++ { // forward
		c := &r.Conversions[i]
		for j := range c.Ops {
			l, err := applyForward(out, &c.Ops[j])
			if err != nil {
				return nil, false, fmt.Errorf("%w: %s %s -> %s: %v", ErrConversion, r.Key(), c.From, c.To, err)
			}
			lossy = lossy || l
		}
	}
	for i := fi - 1; i >= ti; i-- { // backward
		c := &r.Conversions[i]
		for j := len(c.Ops) - 1; j >= 0; j-- {
			l, err := applyBackward(out, &c.Ops[j])
			if err != nil {
				return nil, false, fmt.Errorf("%w: %s %s -> %s: %v", ErrConversion, r.Key(), c.To, c.From, err)
			}
			lossy = lossy || l
		}
	}
	out["apiVersion"] = r.Group + "/" + to
	return out, lossy, nil
}

func applyForward(obj map[string]any, op *FieldOp) (bool, error) {
	switch op.Kind {
	case OpRename:
		return false, rename(obj, op.From, op.To, op.Line)
	case OpDefault:
		if _, ok := get(obj, op.Field); ok {
			return false, nil
		}
		v, _ := deepCopy(op.Value, "")
		return false, set(obj, op.Field, v, op.Line)
	case OpDrop:
		return del(obj, op.Field), nil
	}
	return false, fmt.Errorf("unknown op %q (schema line %d)", op.Kind, op.Line)
}

func applyBackward(obj map[string]any, op *FieldOp) (bool, error) {
	switch op.Kind {
	case OpRename:
		return false, rename(obj, op.To, op.From, op.Line)
	case OpDefault:
		del(obj, op.Field)
		return false, nil
	case OpDrop:
		return true, nil
	}
	return false, fmt.Errorf("unknown op %q (schema line %d)", op.Kind, op.Line)
}

func rename(obj map[string]any, from, to string, line int) error {
	v, ok := get(obj, from)
	if !ok {
		return nil
	}
	if _, exists := get(obj, to); exists {
		return fmt.Errorf("rename %s -> %s (schema line %d): field %s already exists", from, to, line, to)
	}
	if err := set(obj, to, v, line); err != nil {
		return err
	}
	del(obj, from)
	return nil
}

// parent walks to the object holding the last segment of path. With create,
// missing intermediate objects are made; otherwise a missing or non-object
// intermediate returns nil.
func parent(obj map[string]any, path string, create bool, line int) (map[string]any, string, error) {
	segs := strings.Split(path, ".")
	m := obj
	for i, seg := range segs[:len(segs)-1] {
		next, ok := m[seg]
		if !ok {
			if !create {
				return nil, "", nil
			}
			nm := map[string]any{}
			m[seg] = nm
			m = nm
			continue
		}
		nm, isObj := next.(map[string]any)
		if !isObj {
			if !create {
				return nil, "", nil
			}
			return nil, "", fmt.Errorf("writing %s (schema line %d): %s is not an object",
				path, line, strings.Join(segs[:i+1], "."))
		}
		m = nm
	}
	return m, segs[len(segs)-1], nil
}

func get(obj map[string]any, path string) (any, bool) {
	m, last, _ := parent(obj, path, false, 0)
	if m == nil {
		return nil, false
	}
	v, ok := m[last]
	return v, ok
}

func set(obj map[string]any, path string, v any, line int) error {
	m, last, err := parent(obj, path, true, line)
	if err != nil {
		return err
	}
	m[last] = v
	return nil
}

// del deletes path and reports whether it existed.
func del(obj map[string]any, path string) bool {
	m, last, _ := parent(obj, path, false, 0)
	if m == nil {
		return false
	}
	_, ok := m[last]
	delete(m, last)
	return ok
}

// deepCopy copies a JSON value, rejecting anything that is not one.
func deepCopy(v any, at string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			c, err := deepCopy(e, joinPath(at, k))
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			c, err := deepCopy(e, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case nil, bool, string, float64, float32, json.Number,
		int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return t, nil
	}
	if at == "" {
		at = "object"
	}
	return nil, fmt.Errorf("%w: %s holds a %T, not a JSON value", ErrBadObject, at, v)
}

func joinPath(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}
