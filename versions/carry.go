package versions

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Carry-over: no silent loss across versions.
//
// Every object is stored in one encoding version and read and written through any
// served version. A version older than the encoding cannot see some of the stored
// fields (those a later step adds with a default); a version newer than the encoding
// cannot see the fields a later step drops. Reading through such a version hides
// them, and a naive write back through it would lose them. keel holds both versions'
// schemas, so it carries them over exactly instead:
//
//	stored v2:            {spec: {replicas: 1, color: red}}
//	read through v1:      {spec: {size: 1}}           (color hidden, not lost)
//	written back via v1:  {spec: {size: 2}}
//	converted to v2:      {spec: {replicas: 2, color: blue}}  holes: [spec.color]
//	carried over:         {spec: {replicas: 2, color: red}}   what is stored
//
// A hole is a field the writing version cannot express (see walk); the value at a
// hole comes from the stored object converted to the encoding version, never from
// what the client sent. Where carrying over cannot keep a value (the encoding
// version itself cannot hold it, as after a downgrade of the encoding), reads mark
// the object metadata.downgraded (RFD 126's +downgraded) and PrepareWrite reports
// the loss, which the caller refuses unless told to force it.

// A Write is an object prepared for storage by PrepareWrite, and what storing it
// would lose.
type Write struct {
	// Object is the object to store, in the encoding version, with the fields the
	// written version cannot see carried over from the stored object.
	Object map[string]any
	// Lost lists the fields of the written object whose values the encoding
	// version cannot hold (a non-default value of a field the encoding version does
	// not have, a field it drops), as paths in the version where they are lost.
	Lost []string
	// Downgraded lists the fields of the stored object that the written version
	// cannot see and that cannot be carried over into the encoding version: reads
	// through the written version mark the object metadata.downgraded.
	Downgraded []string
}

// Loses reports whether storing w loses any value.
func (w *Write) Loses() bool { return len(w.Lost) > 0 || len(w.Downgraded) > 0 }

// PrepareWrite prepares obj, written through version, for storage in version
// encoding over stored (the current object in storedVersion; nil when there is
// none). It does not mutate its arguments.
//
//  1. Fields version gets by default are filled in when absent (Default).
//  2. The object must read in every served version and come back unchanged:
//     converted to each served version and back (carrying over from itself), it
//     must equal itself, up to empty objects. Otherwise ErrConversion, naming the
//     field (e.g. a v2 object holding v1's spec.size next to spec.replicas).
//  3. It is converted to encoding, and every hole of that conversion takes the
//     stored object's value (stored converted to encoding), if it has one.
//  4. The result must convert from encoding to every served version (else
//     ErrConversion): what is stored is readable by every client.
//
// Empty objects are barely data here: an empty object may come back absent,
// because moving a field out of an object removes the object once empty; but
// nothing, not even an empty object, may come back where there was none.
//
// Errors: those of Convert, and ErrConversion for steps 2 and 4. A stored object that
// cannot be converted to encoding is not carried over (the write replaces it).
func (r *Resource) PrepareWrite(obj map[string]any, version string, stored map[string]any, storedVersion, encoding string) (*Write, error) {
	if !r.HasVersion(version) {
		return nil, fmt.Errorf("%w %q of %s", ErrUnknownVersion, version, r.Key())
	}
	if av, ok := obj["apiVersion"]; ok && av != r.Group+"/"+version {
		return nil, fmt.Errorf("%w: apiVersion %v, writing %s/%s", ErrBadObject, av, r.Group, version)
	}
	w, err := r.Default(obj, version)
	if err != nil {
		return nil, err
	}
	w["apiVersion"] = r.Group + "/" + version
	for _, v := range r.Served() {
		if err := r.checkRoundTrip(w, version, v); err != nil {
			return nil, err
		}
	}
	out, err := r.convert(w, version, encoding)
	if err != nil {
		return nil, err
	}
	res := &Write{Object: out.obj, Lost: out.lost}
	if stored != nil {
		if s, err := r.Default(stored, storedVersion); err == nil {
			if from, err := r.convert(s, storedVersion, encoding); err == nil {
				carry(out.obj, from.obj, out.holes)
			}
			res.Downgraded = r.downgraded(s, storedVersion, version, encoding)
		}
	}
	for _, v := range r.Served() {
		if _, err := r.convert(res.Object, encoding, v); err != nil {
			return nil, fmt.Errorf("stored in %s, the object could not be read as %s/%s: %w", encoding, r.Group, v, err)
		}
	}
	return res, nil
}

// checkRoundTrip fails when w (in version) does not convert to v, or does not come
// back from v unchanged.
func (r *Resource) checkRoundTrip(w map[string]any, version, v string) error {
	if v == version {
		return nil
	}
	there, err := r.convert(w, version, v)
	if err != nil {
		return fmt.Errorf("the object could not be read as %s/%s: %w", r.Group, v, err)
	}
	back, err := r.convert(there.obj, v, version)
	if err != nil {
		return fmt.Errorf("the object could not be read back from %s/%s: %w", r.Group, v, err)
	}
	carry(back.obj, w, back.holes)
	if p, same := diff(back.obj, w, "", true); !same {
		return fmt.Errorf("%w: field %s of this %s/%s object does not survive conversion to %s and back: "+
			"it is another version's field (or its parent)", ErrConversion, p, r.Group, version, v)
	}
	return nil
}

// View converts stored, in storedVersion, to version for reading, with the fields
// version gets by default filled in. When the view hides values of the stored
// object that a write back through version could not carry over into encoding (the
// version new writes are stored in), it sets metadata.downgraded = true and returns
// those fields. It does not mutate stored.
func (r *Resource) View(stored map[string]any, storedVersion, version, encoding string) (map[string]any, []string, error) {
	s, err := r.Default(stored, storedVersion)
	if err != nil {
		return nil, nil, err
	}
	out, err := r.convert(s, storedVersion, version)
	if err != nil {
		return nil, nil, err
	}
	lost := r.downgradedView(out, s, storedVersion, version, encoding)
	if lost != nil {
		meta, ok := out.obj["metadata"].(map[string]any)
		if !ok {
			meta = map[string]any{}
			out.obj["metadata"] = meta
		}
		meta["downgraded"] = true
	}
	return out.obj, lost, nil
}

// downgraded returns the fields of s (defaulted, in storedVersion) that a view
// through version hides and a write back through version would not keep, or nil.
func (r *Resource) downgraded(s map[string]any, storedVersion, version, encoding string) []string {
	view, err := r.convert(s, storedVersion, version)
	if err != nil {
		return nil // unreadable through version: the writer replaces it knowingly
	}
	return r.downgradedView(view, s, storedVersion, version, encoding)
}

// downgradedView is downgraded with the view already converted. It writes the view
// back as a client would and checks that the stored object comes out unchanged.
func (r *Resource) downgradedView(view *walk, s map[string]any, storedVersion, version, encoding string) []string {
	if len(view.lost) == 0 {
		return nil
	}
	lost := slices.Clone(view.lost)
	written, err := r.convert(view.obj, version, encoding)
	if err != nil {
		return lost
	}
	from, err := r.convert(s, storedVersion, encoding)
	if err != nil {
		return lost
	}
	carry(written.obj, from.obj, written.holes)
	back, err := r.convert(written.obj, encoding, storedVersion)
	if err != nil {
		return lost
	}
	if _, same := firstDiff(back.obj, s, ""); !same {
		return lost
	}
	return nil
}

// carry sets each hole of out to from's value there (a copy), shallowest first;
// a hole from has no value for keeps what out has. A hole whose parent in out is
// not an object is skipped: the writer replaced that parent.
func carry(out, from map[string]any, holes []string) {
	holes = slices.Clone(holes)
	sort.Slice(holes, func(i, j int) bool {
		return strings.Count(holes[i], ".") < strings.Count(holes[j], ".")
	})
	var done []string
	for _, h := range holes {
		if slices.ContainsFunc(done, func(d string) bool { return under(h, d) }) {
			continue
		}
		v, ok := get(from, h)
		if !ok {
			continue
		}
		c, _ := deepCopy(v, "")
		if set(out, h, c, 0) == nil {
			done = append(done, h)
		}
	}
}

// Default returns a copy of obj, an object in version v, with the fields v gets by
// default filled in where absent: the defaults of every conversion step up to v,
// moved by the renames after them and gone with the drops. A field whose parent is
// not an object is left alone. It fails only as deepCopy does (ErrBadObject).
func (r *Resource) Default(obj map[string]any, v string) (map[string]any, error) {
	if obj == nil {
		return nil, fmt.Errorf("%w: nil object", ErrBadObject)
	}
	cp, err := deepCopy(obj, "")
	if err != nil {
		return nil, err
	}
	out := cp.(map[string]any)
	for _, d := range r.defaults(v) {
		if _, ok := get(out, d.Field); !ok {
			c, _ := deepCopy(d.Value, "")
			_ = set(out, d.Field, c, d.Line)
		}
	}
	return out, nil
}

// defaults returns the default ops that apply to objects of version v, with their
// fields as paths in v.
func (r *Resource) defaults(v string) []FieldOp {
	var out []FieldOp
	for i := 0; i < r.index(v); i++ {
		for _, op := range r.Conversions[i].Ops {
			switch op.Kind {
			case OpDefault:
				out = append(out, op)
			case OpRename:
				for j := range out {
					if under(out[j].Field, op.From) {
						out[j].Field = op.To + out[j].Field[len(op.From):]
					}
				}
			case OpDrop:
				out = slices.DeleteFunc(out, func(d FieldOp) bool { return under(d.Field, op.Field) })
			}
		}
	}
	return out
}

// firstDiff compares two JSON values up to empty objects (an empty object equals an
// absent field) and the root's apiVersion, numbers by value. It returns the first
// differing path (keys in order) and whether they are equal.
func firstDiff(a, b any, at string) (string, bool) { return diff(a, b, at, false) }

// diff is firstDiff; with noExtra, an empty object a holds where b holds nothing is
// a difference (only b's empty objects may be missing from a).
func diff(a, b any, at string, noExtra bool) (string, bool) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			if at == "" && k == "apiVersion" {
				continue
			}
			av, ain := am[k]
			bv, bin := bm[k]
			p := joinPath(at, k)
			if !ain || !bin {
				if (ain && (noExtra || !emptyObject(av))) || (bin && !emptyObject(bv)) {
					return p, false
				}
				continue
			}
			if d, same := diff(av, bv, p, noExtra); !same {
				return d, false
			}
		}
		return "", true
	}
	if aok || bok {
		if at == "" {
			at = "object"
		}
		return at, false
	}
	if !jsonEqual(a, b) {
		if at == "" {
			at = "object"
		}
		return at, false
	}
	return "", true
}

// emptyObject reports whether v is an object holding nothing but empty objects.
func emptyObject(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for _, e := range m {
		if !emptyObject(e) {
			return false
		}
	}
	return true
}

// jsonEqual compares two JSON values exactly; numbers compare by value whatever
// their Go type (json.Number from a decoder, float64 from the schema).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case nil, bool, string:
		return a == b
	}
	na, ok := number(a)
	if !ok {
		return false
	}
	nb, ok := number(b)
	return ok && na == nb
}

// number returns a JSON number's exact value in a canonical form (sign, significant
// digits, exponent), so that 1, 1.0, 10e-1 and float64(1) are one number. It does no
// arithmetic on the digits: an untrusted 1e999999999 costs what its text costs.
func number(v any) (string, bool) {
	var s string
	switch n := v.(type) {
	case json.Number:
		s = string(n)
	case float64:
		s = strconv.FormatFloat(n, 'g', -1, 64)
	case float32:
		s = strconv.FormatFloat(float64(n), 'g', -1, 32)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		s = fmt.Sprint(n)
	default:
		return "", false
	}
	return canonNumber(s)
}

// canonNumber canonicalizes a number in JSON syntax: "-" digits "e" exponent, with
// no leading or trailing zero digit; zero is "0".
func canonNumber(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.ParseInt(strings.TrimPrefix(s[i+1:], "+"), 10, 64)
		if err != nil || e > 1<<60 || e < -(1<<60) {
			return "", false
		}
		mant, exp = s[:i], e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", false
	}
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	trimmed = strings.TrimLeft(trimmed, "0")
	if trimmed == "" {
		return "0", true
	}
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + strconv.FormatInt(exp, 10), true
}
