package versions

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// allServed is widgets-v1v2v3.yaml with every version served: rename, default and
// drop between v1 and v2, a rename into a new parent and an object default between
// v2 and v3beta1.
const allServed = `resources:
  - group: apps
    name: widgets
    prefix: /registry/apps/widgets/
    preferredVersion: v2
    versions: [{name: v1, served: true}, {name: v2, served: true}, {name: v3beta1, served: true}]
    conversions:
      - from: v1
        to: v2
        ops:
          - rename: {from: spec.size, to: spec.replicas}
          - default: {field: spec.color, value: blue}
          - drop: {field: spec.legacy, lossy: true}
      - from: v2
        to: v3beta1
        ops:
          - rename: {from: spec.replicas, to: spec.scale.replicas}
          - default: {field: spec.labels, value: {tier: web}}
`

func allServedWidgets(t testing.TB) *Resource {
	t.Helper()
	s, err := ParseSchema("all.yaml", []byte(allServed))
	if err != nil {
		t.Fatal(err)
	}
	return s.Lookup("apps", "widgets")
}

// jsonObj decodes s as the API does (numbers as json.Number).
func jsonObj(t testing.TB, s string) map[string]any {
	t.Helper()
	o, err := DecodeObject([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestRedBlueRoundTrip is issue 10's regression: a v2 widget with spec.color red,
// read through v1, written back through v1 with its revision, read through v2 —
// the color must stay red (it was silently reset to blue).
func TestRedBlueRoundTrip(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2.yaml")
	created, err := r.PrepareWrite(jsonObj(t, `{"metadata":{"name":"w"},"spec":{"replicas":1,"color":"red"}}`), "v2", nil, "", "v2")
	if err != nil || created.Loses() {
		t.Fatalf("create: %v %+v", err, created)
	}
	v1, downgraded, err := r.View(created.Object, "v2", "v1", "v2")
	if err != nil || downgraded != nil {
		t.Fatalf("v1 view: %v downgraded %v", err, downgraded)
	}
	if got := mustJSON(v1); got != `{"apiVersion":"apps/v1","metadata":{"name":"w"},"spec":{"size":1}}` {
		t.Fatalf("v1 view = %s", got)
	}
	v1["spec"].(map[string]any)["size"] = json.Number("2")
	written, err := r.PrepareWrite(v1, "v1", created.Object, "v2", "v2")
	if err != nil || written.Loses() {
		t.Fatalf("write back: %v %+v", err, written)
	}
	v2, _, err := r.View(written.Object, "v2", "v2", "v2")
	if err != nil {
		t.Fatal(err)
	}
	if got := mustJSON(v2); got != `{"apiVersion":"apps/v2","metadata":{"name":"w"},"spec":{"color":"red","replicas":2}}` {
		t.Fatalf("v2 after the v1 write = %s", got)
	}
}

// TestPrepareWrite: carry-over, refusals and reported losses, one write each.
//
//	widgets-v1v2.yaml: v1 --[rename spec.size->spec.replicas, default spec.color=blue,
//	                         drop spec.legacy]--> v2
func TestPrepareWrite(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2.yaml")
	tests := []struct {
		name, version, in string
		stored, sv, enc   string // stored object ("" = none) in sv; the encoding
		want              string // stored result
		lost, downgraded  []string
		err               string
	}{
		{name: "create through v2 fills the default", version: "v2", in: `{"spec":{"replicas":1}}`, enc: "v2",
			want: `{"apiVersion":"apps/v2","spec":{"color":"blue","replicas":1}}`},
		{name: "v1 carries the color over", version: "v1", in: `{"spec":{"size":3}}`,
			stored: `{"apiVersion":"apps/v2","spec":{"replicas":1,"color":"red"}}`, sv: "v2", enc: "v2",
			want: `{"apiVersion":"apps/v2","spec":{"color":"red","replicas":3}}`},
		{name: "v1 carries over from a v1-stored object moving to v2", version: "v1", in: `{"spec":{"size":3}}`,
			stored: `{"apiVersion":"apps/v1","spec":{"size":1}}`, sv: "v1", enc: "v2",
			want: `{"apiVersion":"apps/v2","spec":{"color":"blue","replicas":3}}`},
		{name: "v2 carries the dropped field over into v1 storage", version: "v2", in: `{"spec":{"replicas":4}}`,
			stored: `{"apiVersion":"apps/v1","spec":{"size":1,"legacy":"x"}}`, sv: "v1", enc: "v1",
			want: `{"apiVersion":"apps/v1","spec":{"legacy":"x","size":4}}`},
		{name: "the client's own value wins", version: "v2", in: `{"spec":{"replicas":1,"color":"green"}}`,
			stored: `{"apiVersion":"apps/v2","spec":{"replicas":1,"color":"red"}}`, sv: "v2", enc: "v2",
			want: `{"apiVersion":"apps/v2","spec":{"color":"green","replicas":1}}`},
		{name: "red cannot be stored in v1", version: "v2", in: `{"spec":{"replicas":1,"color":"red"}}`, enc: "v1",
			want: `{"apiVersion":"apps/v1","spec":{"size":1}}`, lost: []string{"spec.color"}},
		{name: "blue can", version: "v2", in: `{"spec":{"replicas":1,"color":"blue"}}`, enc: "v1",
			want: `{"apiVersion":"apps/v1","spec":{"size":1}}`},
		{name: "v2 storage cannot hold legacy", version: "v1", in: `{"spec":{"size":1,"legacy":"x"}}`, enc: "v2",
			want: `{"apiVersion":"apps/v2","spec":{"color":"blue","replicas":1}}`, lost: []string{"spec.legacy"}},
		{name: "a v1 write over v2 red in v1 storage downgrades", version: "v1", in: `{"spec":{"size":1}}`,
			stored: `{"apiVersion":"apps/v2","spec":{"replicas":1,"color":"red"}}`, sv: "v2", enc: "v1",
			want: `{"apiVersion":"apps/v1","spec":{"size":1}}`, downgraded: []string{"spec.color"}},
		{name: "v2 object holding v1's field", version: "v2", in: `{"spec":{"replicas":1,"size":7}}`, enc: "v2",
			err: "field spec.size already exists"},
		{name: "v1 object holding v2's field", version: "v1", in: `{"spec":{"replicas":7}}`, enc: "v2",
			err: "field spec.replicas of this apps/v1 object does not survive conversion to v2 and back"},
		{name: "v1 object holding v2's color", version: "v1", in: `{"spec":{"size":1,"color":"blue"}}`, enc: "v2",
			err: "field spec.color of this apps/v1 object"},
		{name: "v2 object holding the dropped field", version: "v2", in: `{"spec":{"legacy":1}}`, enc: "v2",
			err: "field spec.legacy of this apps/v2 object"},
		{name: "wrong apiVersion", version: "v2", in: `{"apiVersion":"apps/v1"}`, enc: "v2", err: "apiVersion apps/v1"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stored map[string]any
			if tt.stored != "" {
				stored = jsonObj(t, tt.stored)
			}
			in := jsonObj(t, tt.in)
			before := mustJSON(in)
			w, err := r.PrepareWrite(in, tt.version, stored, tt.sv, tt.enc)
			if mustJSON(in) != before || (stored != nil && mustJSON(stored) != mustJSON(jsonObj(t, tt.stored))) {
				t.Errorf("#%d: an argument was mutated", i)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) ||
					!(errors.Is(err, ErrConversion) || errors.Is(err, ErrBadObject)) {
					t.Fatalf("#%d: err = %v, want %q", i, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("#%d: %v", i, err)
			}
			if got := mustJSON(w.Object); got != tt.want {
				t.Errorf("#%d: stored = %s, want %s", i, got, tt.want)
			}
			if !slices.Equal(w.Lost, tt.lost) || !slices.Equal(w.Downgraded, tt.downgraded) {
				t.Errorf("#%d: lost %v downgraded %v, want %v %v", i, w.Lost, w.Downgraded, tt.lost, tt.downgraded)
			}
		})
	}
}

// TestViewDowngraded: a read is marked only when a write back through its version
// could not keep what it hides.
func TestViewDowngraded(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2.yaml")
	red := jsonObj(t, `{"apiVersion":"apps/v2","metadata":{"name":"w"},"spec":{"replicas":1,"color":"red"}}`)
	for i, tt := range []struct {
		version, enc string
		marked       bool
	}{
		{"v1", "v2", false}, // carried over on write
		{"v2", "v2", false},
		{"v1", "v1", true},  // the encoding went back to v1: red cannot be kept
		{"v2", "v1", false}, // nothing hidden; a write of red is reported as Lost instead
	} {
		out, lost, err := r.View(red, "v2", tt.version, tt.enc)
		if err != nil {
			t.Fatal(err)
		}
		marked := out["metadata"].(map[string]any)["downgraded"] == true
		if marked != tt.marked || (lost != nil) != tt.marked {
			t.Errorf("#%d: view %s enc %s: marked %v lost %v, want %v", i, tt.version, tt.enc, marked, lost, tt.marked)
		}
	}
}

func TestDefault(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2v3.yaml")
	for i, tt := range []struct{ v, in, want string }{
		{"v1", `{}`, `{}`},
		{"v2", `{}`, `{"spec":{"color":"blue"}}`},
		{"v2", `{"spec":{"color":"red"}}`, `{"spec":{"color":"red"}}`},
		{"v3beta1", `{"spec":{"labels":{}}}`, `{"spec":{"color":"blue","labels":{}}}`},
		{"v2", `{"spec":"x"}`, `{"spec":"x"}`},
	} {
		got, err := r.Default(jsonObj(t, tt.in), tt.v)
		if err != nil || mustJSON(got) != tt.want {
			t.Errorf("#%d: Default(%s, %s) = %s %v, want %s", i, tt.in, tt.v, mustJSON(got), err, tt.want)
		}
	}
}

func TestJSONEqualNumbers(t *testing.T) {
	for i, tt := range []struct {
		a, b any
		eq   bool
	}{
		{json.Number("1"), 1.0, true},
		{json.Number("1.0"), json.Number("10e-1"), true},
		{json.Number("-0"), json.Number("0.000"), true},
		{json.Number("12345678901234567890"), json.Number("12345678901234567891"), false},
		{json.Number("1e999999999"), json.Number("1e999999998"), false},
		{json.Number("1e999999999999999999999"), json.Number("1e999999999999999999999"), false},
		{json.Number("0.1"), 0.1, true},
		{json.Number("2"), "2", false},
		{nil, false, false},
	} {
		if got := jsonEqual(tt.a, tt.b); got != tt.eq {
			t.Errorf("#%d: jsonEqual(%v, %v) = %v", i, tt.a, tt.b, got)
		}
	}
}

// TestNoSilentLoss is the property of issue 10: random objects of every version,
// written with every encoding, read through every version and written back
// unchanged into every encoding. A write back that reports no loss leaves every
// version's view of the object as it was; one that loses reports it (Lost or
// Downgraded), and a read that hides what a write back would lose is marked.
// Every accepted write reads in every served version.
func TestNoSilentLoss(t *testing.T) {
	for _, r := range []*Resource{allServedWidgets(t), loadWidgets(t, "widgets-v1v2.yaml")} {
		rng := rand.New(rand.NewPCG(10, 3))
		versions := r.Decodable()
		accepted := 0
		for i := range 3000 {
			a := versions[rng.IntN(len(versions))]
			e := versions[rng.IntN(len(versions))]
			o := randomObject(rng)
			w, err := r.PrepareWrite(o, a, nil, "", e)
			if err != nil {
				if !errors.Is(err, ErrConversion) {
					t.Fatalf("#%d: %s %s: refused with %v", i, a, mustJSON(o), err)
				}
				continue
			}
			if w.Loses() {
				continue // refused by the server unless forced
			}
			accepted++
			checkNoSilentLoss(t, r, i, w.Object, e)
		}
		if accepted < 300 {
			t.Errorf("%s: only %d of 3000 random objects accepted: the generator is too wild", r.Key(), accepted)
		}
	}
}

func checkNoSilentLoss(t *testing.T, r *Resource, i int, s map[string]any, e string) {
	t.Helper()
	views := map[string]map[string]any{}
	for _, v := range r.Served() {
		view, _, err := r.View(s, e, v, e)
		if err != nil {
			t.Fatalf("#%d: stored %s (%s) does not read as %s: %v", i, mustJSON(s), e, v, err)
		}
		views[v] = view
	}
	for _, b := range r.Served() {
		for _, e2 := range r.Decodable() {
			view, hidden, err := r.View(s, e, b, e2)
			if err != nil {
				t.Fatal(err)
			}
			back := unmarked(view)
			w, err := r.PrepareWrite(back, b, s, e, e2)
			if err != nil {
				t.Fatalf("#%d: the %s view %s of %s (%s) cannot be written back: %v", i, b, mustJSON(view), mustJSON(s), e, err)
			}
			if !slices.Equal(w.Downgraded, hidden) {
				t.Errorf("#%d: view through %s (enc %s) marked %v, write back reports %v", i, b, e2, hidden, w.Downgraded)
			}
			if w.Loses() {
				continue
			}
			for _, c := range r.Served() {
				got, _, err := r.View(w.Object, e2, c, e2)
				if err != nil {
					t.Fatal(err)
				}
				if p, same := firstDiff(unmarked(got), unmarked(views[c]), ""); !same {
					t.Errorf("#%d: stored %s (%s), read via %s, written back into %s: the %s view changed at %s without a word:\n  %s\n  %s",
						i, mustJSON(s), e, b, e2, c, p, mustJSON(views[c]), mustJSON(got))
				}
			}
		}
	}
}

// unmarked returns obj without metadata.downgraded (a server-set field).
func unmarked(obj map[string]any) map[string]any {
	cp, _ := deepCopy(obj, "")
	out := cp.(map[string]any)
	if m, ok := out["metadata"].(map[string]any); ok {
		delete(m, "downgraded")
	}
	return out
}

// randomObject draws an object from the fields every widgets version knows, and a
// few no version knows, with values that include the defaults, nulls and empty
// objects.
func randomObject(rng *rand.Rand) map[string]any {
	paths := []string{"spec.size", "spec.replicas", "spec.color", "spec.legacy", "spec.scale.replicas",
		"spec.labels", "spec.labels.tier", "spec.other", "spec.scale", "status", "spec"}
	o := map[string]any{"metadata": map[string]any{"name": "w"}}
	for _, p := range paths {
		if rng.IntN(3) == 0 {
			_ = set(o, p, randomValue(rng), 0)
		}
	}
	return o
}

func randomValue(rng *rand.Rand) any {
	switch rng.IntN(9) {
	case 0:
		return nil
	case 1:
		return map[string]any{}
	case 2:
		return map[string]any{"tier": "web"}
	case 3:
		return "blue"
	case 4:
		return "red"
	case 5:
		return rng.IntN(2) == 0
	case 6:
		return []any{json.Number("1"), "x"}
	}
	return json.Number(fmt.Sprint(rng.IntN(5)))
}

// TestPrepareWriteDoesNotShare: the stored result shares nothing with the inputs.
func TestPrepareWriteDoesNotShare(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2.yaml")
	stored := jsonObj(t, `{"apiVersion":"apps/v2","spec":{"replicas":1,"color":{"r":1}}}`)
	w, err := r.PrepareWrite(jsonObj(t, `{"spec":{"size":2}}`), "v1", stored, "v2", "v2")
	if err != nil {
		t.Fatal(err)
	}
	w.Object["spec"].(map[string]any)["color"].(map[string]any)["r"] = 9
	if !reflect.DeepEqual(stored["spec"].(map[string]any)["color"], map[string]any{"r": json.Number("1")}) {
		t.Error("the carried value is shared with the stored object")
	}
}
