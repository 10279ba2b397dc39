package versions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
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
// order) or backward (applying the inverse ops in reverse order). Each op has
// an exact inverse, so a walk there and back returns the object it started
// from, except where a version cannot hold a value (the loss, which lossy
// reports):
//
//   - rename a -> b moves a to b; it is a no-op when a is absent and fails with
//     ErrConversion when b already exists. Its inverse is rename b -> a.
//   - default f = v sets f to a copy of v when f is absent. Its inverse
//     deletes f: a loss when f held anything but v.
//   - drop f deletes f: a loss when f was present. Its inverse cannot know f
//     (Resource.PrepareWrite carries it over from the stored object).
//
// Writing a path creates missing intermediate objects; an intermediate that
// exists but is not an object is ErrConversion (for reads and deletes it
// means the field is absent). Moving or deleting a field removes the
// intermediate objects it leaves empty, so that a rename into a new parent
// (spec.replicas -> spec.scale.replicas) inverts exactly.
//
// Convert never mutates obj: it works on a deep copy. It sets
// out["apiVersion"] = Group + "/" + to. from == to returns a copy unchanged
// except for apiVersion. lossy is true if the walk discarded a value: a
// forward drop removed a present field, or a backward default removed a value
// other than the default.
//
// Errors: ErrUnknownVersion if from or to is not declared; ErrBadObject if
// obj is nil, holds values that are not JSON (anything but nil, bool,
// numbers, string, map[string]any and []any), or has an apiVersion other than
// Group + "/" + from; ErrConversion if an op cannot be applied.
func (r *Resource) Convert(obj map[string]any, from, to string) (out map[string]any, lossy bool, err error) {
	w, err := r.convert(obj, from, to)
	if err != nil {
		return nil, false, err
	}
	return w.obj, len(w.lost) > 0, nil
}

// ConvertLost is Convert, naming what the conversion loses instead of only saying
// whether it does: the paths whose values it discarded, each in the version where it
// discarded them. A caller that must not lose anything (the migrator) refuses a
// conversion with any.
func (r *Resource) ConvertLost(obj map[string]any, from, to string) (map[string]any, []string, error) {
	w, err := r.convert(obj, from, to)
	if err != nil {
		return nil, nil, err
	}
	return w.obj, w.lost, nil
}

// convert is Convert, keeping track of what the walk lost and of its holes.
func (r *Resource) convert(obj map[string]any, from, to string) (*walk, error) {
	fi, ti := r.index(from), r.index(to)
	if fi < 0 {
		return nil, fmt.Errorf("%w %q of %s", ErrUnknownVersion, from, r.Key())
	}
	if ti < 0 {
		return nil, fmt.Errorf("%w %q of %s", ErrUnknownVersion, to, r.Key())
	}
	if obj == nil {
		return nil, fmt.Errorf("%w: nil object", ErrBadObject)
	}
	if av, ok := obj["apiVersion"]; ok && av != r.Group+"/"+from {
		return nil, fmt.Errorf("%w: apiVersion %v, converting from %s/%s", ErrBadObject, av, r.Group, from)
	}
	cp, err := deepCopy(obj, "")
	if err != nil {
		return nil, err
	}
	w := &walk{obj: cp.(map[string]any)}
	for i := fi; i < ti; i++ { // forward
		c := &r.Conversions[i]
		for j := range c.Ops {
			if err := w.forward(&c.Ops[j]); err != nil {
				return nil, fmt.Errorf("%w: %s %s -> %s: %v", ErrConversion, r.Key(), c.From, c.To, err)
			}
		}
	}
	for i := fi - 1; i >= ti; i-- { // backward
		c := &r.Conversions[i]
		for j := len(c.Ops) - 1; j >= 0; j-- {
			if err := w.backward(&c.Ops[j]); err != nil {
				return nil, fmt.Errorf("%w: %s %s -> %s: %v", ErrConversion, r.Key(), c.To, c.From, err)
			}
		}
	}
	w.obj["apiVersion"] = r.Group + "/" + to
	return w, nil
}

// walk is one conversion in progress over obj, its private copy.
//
// It records two things the converted object alone cannot tell:
//
//   - lost: the paths whose value the walk discarded (a drop of a present field;
//     the inverse of a default removing a value other than the default), each in
//     the version where it was discarded.
//   - holes: the paths, in the version reached so far, whose value the source
//     version could not express, so the walk made it up: a default it filled in,
//     or a field a backward walk knows was dropped on the way up. A hole moves
//     with the renames after it and disappears with a delete of its path.
//
// Example, widgets v1 -> v2 = [rename spec.size -> spec.replicas,
// default spec.color = blue]: {spec: {size: 1}} walks forward to
// {spec: {replicas: 1, color: blue}} with holes [spec.color]: v1 cannot say the
// color, so a v1 write must take it from the stored object. Walking
// {spec: {replicas: 1, color: red}} backward loses [spec.color].
type walk struct {
	obj   map[string]any
	lost  []string
	holes []string
}

func (w *walk) forward(op *FieldOp) error {
	switch op.Kind {
	case OpRename:
		return w.move(op.From, op.To, op.Line)
	case OpDefault:
		if _, ok := get(w.obj, op.Field); ok {
			return nil
		}
		v, _ := deepCopy(op.Value, "")
		if err := set(w.obj, op.Field, v, op.Line); err != nil {
			return err
		}
		w.holes = append(w.holes, op.Field)
		return nil
	case OpDrop:
		if del(w.obj, op.Field) {
			w.lost = append(w.lost, op.Field)
		}
		w.forget(op.Field)
		return nil
	}
	return fmt.Errorf("unknown op %q (schema line %d)", op.Kind, op.Line)
}

func (w *walk) backward(op *FieldOp) error {
	switch op.Kind {
	case OpRename:
		return w.move(op.To, op.From, op.Line)
	case OpDefault:
		if v, ok := get(w.obj, op.Field); ok {
			del(w.obj, op.Field)
			if !jsonEqual(v, op.Value) {
				w.lost = append(w.lost, op.Field)
			}
		}
		w.forget(op.Field)
		return nil
	case OpDrop:
		if _, ok := get(w.obj, op.Field); !ok {
			w.holes = append(w.holes, op.Field)
		}
		return nil
	}
	return fmt.Errorf("unknown op %q (schema line %d)", op.Kind, op.Line)
}

// move renames from to to, moving the holes under from along.
func (w *walk) move(from, to string, line int) error {
	v, ok := get(w.obj, from)
	if ok {
		if _, exists := get(w.obj, to); exists {
			return fmt.Errorf("rename %s -> %s (schema line %d): field %s already exists", from, to, line, to)
		}
		if err := set(w.obj, to, v, line); err != nil {
			return err
		}
		del(w.obj, from)
		w.forget(to)
	}
	for i, h := range w.holes {
		if under(h, from) {
			w.holes[i] = to + h[len(from):]
		}
	}
	return nil
}

// forget drops the holes at or under path: its value is now known or gone.
func (w *walk) forget(path string) {
	w.holes = slices.DeleteFunc(w.holes, func(h string) bool { return under(h, path) })
}

// under reports whether path is root or inside it.
func under(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+".")
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

// del deletes path and reports whether it existed. The intermediate objects the
// delete leaves empty are deleted too (never obj itself): a set that had to create
// them is undone exactly.
func del(obj map[string]any, path string) bool {
	segs := strings.Split(path, ".")
	chain := make([]map[string]any, 0, len(segs))
	m := obj
	for _, seg := range segs[:len(segs)-1] {
		next, ok := m[seg].(map[string]any)
		if !ok {
			return false
		}
		chain = append(chain, m)
		m = next
	}
	if _, ok := m[segs[len(segs)-1]]; !ok {
		return false
	}
	delete(m, segs[len(segs)-1])
	for i := len(chain) - 1; i >= 0 && len(m) == 0; i-- {
		delete(chain[i], segs[i])
		m = chain[i]
	}
	return true
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
