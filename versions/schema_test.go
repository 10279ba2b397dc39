package versions

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestLoadSchemaV1V2(t *testing.T) {
	s, err := LoadSchema("testdata/widgets-v1v2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.File != "testdata/widgets-v1v2.yaml" {
		t.Errorf("File = %q", s.File)
	}
	want := &Resource{
		Group: "apps", Name: "widgets", Prefix: "/registry/apps/widgets/",
		Versions:  []Version{{"v1", true}, {"v2", true}},
		Preferred: "v2",
		Conversions: []Conversion{{From: "v1", To: "v2", Ops: []FieldOp{
			{Kind: "rename", From: "spec.size", To: "spec.replicas", Line: 15},
			{Kind: "default", Field: "spec.color", Value: "blue", Line: 16},
			{Kind: "drop", Field: "spec.legacy", Lossy: true, Line: 17},
		}}},
	}
	if len(s.Resources) != 1 || !reflect.DeepEqual(s.Resources[0], want) {
		t.Fatalf("got %+v\nwant %+v", s.Resources[0], want)
	}
	r := s.Lookup("apps", "widgets")
	if r != s.Resources[0] {
		t.Fatal("Lookup apps/widgets")
	}
	if s.Lookup("apps", "gadgets") != nil || s.Lookup("core", "widgets") != nil {
		t.Fatal("Lookup of absent resource is not nil")
	}
	if r.Key() != "apps/widgets" {
		t.Errorf("Key = %q", r.Key())
	}
	if got := r.Decodable(); !reflect.DeepEqual(got, []string{"v1", "v2"}) {
		t.Errorf("Decodable = %v", got)
	}
	if got := r.Served(); !reflect.DeepEqual(got, []string{"v1", "v2"}) {
		t.Errorf("Served = %v", got)
	}
	if !r.HasVersion("v1") || !r.HasVersion("v2") || r.HasVersion("v3") {
		t.Error("HasVersion")
	}
	if !r.Newer("v2", "v1") || r.Newer("v1", "v2") || r.Newer("v1", "v1") || r.Newer("v3", "v1") || r.Newer("v2", "v0") {
		t.Error("Newer")
	}
}

func TestLoadSchemaFixtures(t *testing.T) {
	s, err := LoadSchema("testdata/widgets-v1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := s.Resources[0]
	if r.Preferred != "v1" || len(r.Conversions) != 0 || !reflect.DeepEqual(r.Decodable(), []string{"v1"}) {
		t.Errorf("widgets-v1: %+v", r)
	}

	s, err = LoadSchema("testdata/widgets-v2only.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r = s.Resources[0]
	if r.Preferred != "v2" || len(r.Conversions) != 0 || r.HasVersion("v1") {
		t.Errorf("widgets-v2only: %+v", r)
	}

	s, err = LoadSchema("testdata/widgets-v1v2v3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Resources) != 2 || s.Resources[0].Key() != "apps/gadgets" || s.Resources[1].Key() != "apps/widgets" {
		t.Fatalf("resources not sorted: %v, %v", s.Resources[0].Key(), s.Resources[1].Key())
	}
	w := s.Lookup("apps", "widgets")
	if got := w.Served(); !reflect.DeepEqual(got, []string{"v2", "v3beta1"}) {
		t.Errorf("Served = %v", got)
	}
	if got := w.Decodable(); !reflect.DeepEqual(got, []string{"v1", "v2", "v3beta1"}) {
		t.Errorf("Decodable = %v", got)
	}
	labels := w.Conversions[1].Ops[1].Value
	wantLabels := map[string]any{"tier": "web", "weight": 3.0, "on": true, "none": nil, "list": []any{1.0, "two"}}
	if !reflect.DeepEqual(labels, wantLabels) {
		t.Errorf("default value = %#v", labels)
	}
	if got := s.ByPrefix("/registry/apps/gadgets/g1"); got == nil || got.Name != "gadgets" {
		t.Errorf("ByPrefix gadgets = %v", got)
	}
	if got := s.ByPrefix("/registry/apps/widgets/"); got != w {
		t.Errorf("ByPrefix widgets = %v", got)
	}
	if got := s.ByPrefix("/registry/apps/other/x"); got != nil {
		t.Errorf("ByPrefix other = %v", got)
	}
	if got := s.ByPrefix("/registry/apps/widgets"); got != nil {
		t.Errorf("ByPrefix without trailing slash = %v", got)
	}
}

func TestLoadSchemaMissingFile(t *testing.T) {
	_, err := LoadSchema("testdata/nope.yaml")
	if err == nil || errors.Is(err, ErrBadSchema) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadSchemaTooBig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	data := "resources: []\n" + strings.Repeat("#", MaxSchemaSize)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadSchema(path)
	if !errors.Is(err, ErrBadSchema) || !strings.Contains(err.Error(), path+":1: ") || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("err = %v", err)
	}
}

func TestBadFixtures(t *testing.T) {
	for file, want := range map[string]string{
		"bad-drop-not-lossy.yaml":     "testdata/bad-drop-not-lossy.yaml:15: drop of spec.legacy loses data: mark it lossy: true",
		"bad-unknown-field.yaml":      `testdata/bad-unknown-field.yaml:6: unknown field "foo"`,
		"bad-missing-conversion.yaml": "testdata/bad-missing-conversion.yaml:2: resource apps/widgets has no conversion v1 -> v2",
		"bad-prefix-overlap.yaml":     `testdata/bad-prefix-overlap.yaml:11: prefix "/registry/apps/gadgets/" of apps/gadgets overlaps prefix "/registry/apps/" of apps/widgets (line 4)`,
	} {
		_, err := LoadSchema("testdata/" + file)
		if !errors.Is(err, ErrBadSchema) || err.Error() != want {
			t.Errorf("%s:\n got  %v\n want %s", file, err, want)
		}
	}
}

// head is a valid resource header; its lines are 1-5, versions start at 6.
const head = `resources:
  - group: apps
    name: widgets
    prefix: /registry/apps/widgets/
    preferredVersion: v1
`

const v1v2 = head + `    versions:
      - name: v1
        served: true
      - name: v2
        served: true
    conversions:
      - from: v1
        to: v2
        ops:
`

// ops1 is v1v2 followed by one op at line 15.
func ops1(op string) string { return v1v2 + "          - " + op + "\n" }

func TestParseSchemaErrors(t *testing.T) {
	widget := func(group, name, prefix string) string {
		return "  - group: " + group + "\n    name: " + name + "\n    prefix: " + prefix +
			"\n    preferredVersion: v1\n    versions: [{name: v1, served: true}]\n"
	}
	tests := []struct {
		name, data string
		line       int
		want       string
	}{
		{"empty", "", 1, "empty schema file"},
		{"only comments", "# nothing\n", 1, "empty schema file"},
		{"yaml syntax", "resources:\n  - group: [\n", 2, "did not find expected"},
		{"two documents", "resources: []\n---\nresources: []\n", 2, "more than one YAML document"},
		{"top level list", "- a\n- b\n", 1, "schema file top level must be a mapping"},
		{"top level scalar", "hello\n", 1, "must be a mapping"},
		{"unknown top field", "resources: []\nfoo: 1\n", 2, `unknown field "foo"`},
		{"duplicate top field", "resources: []\nresources: []\n", 2, `duplicate field "resources"`},
		{"no resources", "resources: []\n", 1, "schema declares no resources"},
		{"no resources key", "{}\n", 1, "schema declares no resources"},
		{"resources not list", "resources: 3\n", 1, "resources must be a list"},
		{"resource not mapping", "resources:\n  - 3\n", 2, "resource must be a mapping"},
		{"unknown resource field", head + "    foo: bar\n", 6, `unknown field "foo"`},
		{"no group", "resources:\n  - name: widgets\n", 2, "resource has no group"},
		{"empty group", "resources:\n  - group: \"\"\n", 2, "resource has no group"},
		{"bad group", "resources:\n  - group: Apps\n", 2, `group "Apps" must be lowercase`},
		{"group not string", "resources:\n  - group: 12\n", 2, "group must be a string"},
		{"group with slash", "resources:\n  - group: a/b\n", 2, `group "a/b" must be lowercase`},
		{"no name", "resources:\n  - group: apps\n", 2, "resource has no name"},
		{"bad name", "resources:\n  - group: apps\n    name: my.widgets\n", 3, `name "my.widgets" must be lowercase`},
		{"no prefix", "resources:\n  - group: apps\n    name: w\n", 2, "resource apps/w has no prefix"},
		{"prefix no leading slash", "resources:\n  - group: apps\n    name: w\n    prefix: a/\n", 4, `prefix "a/" of apps/w must start and end with "/"`},
		{"prefix no trailing slash", "resources:\n  - group: apps\n    name: w\n    prefix: /a\n", 4, `must start and end with "/"`},
		{"no versions", head, 2, "resource apps/widgets declares no versions"},
		{"empty versions", head + "    versions: []\n", 2, "declares no versions"},
		{"versions not list", head + "    versions: v1\n", 6, "versions must be a list"},
		{"version not mapping", head + "    versions: [v1]\n", 6, "version must be a mapping"},
		{"unknown version field", head + "    versions:\n      - name: v1\n        served: true\n        storage: true\n", 9, `unknown field "storage"`},
		{"version without name", head + "    versions:\n      - served: true\n", 7, "version has no name"},
		{"bad version name", head + "    versions:\n      - name: V1\n", 7, `version name "V1" must look like`},
		{"bad version name gamma", head + "    versions:\n      - name: v1gamma1\n", 7, `version name "v1gamma1"`},
		{"bad version name no digits", head + "    versions:\n      - name: v2beta\n", 7, `version name "v2beta"`},
		{"duplicate version", head + "    versions:\n      - name: v1\n        served: true\n      - name: v1\n", 9, `duplicate version "v1"`},
		{"served not bool", head + "    versions:\n      - name: v1\n        served: yes please\n", 8, "served must be true or false"},
		{"none served", head + "    versions:\n      - name: v1\n      - name: v2\n        served: false\n", 7, "resource apps/widgets serves no version"},
		{"no preferred", strings.Replace(head, "    preferredVersion: v1\n", "", 1) + "    versions: [{name: v1, served: true}]\n", 2, "resource apps/widgets has no preferredVersion"},
		{"undeclared preferred", strings.Replace(head, "preferredVersion: v1", "preferredVersion: v3", 1) + "    versions: [{name: v1, served: true}]\n", 5, `preferredVersion "v3" is not a declared version of apps/widgets`},
		{"duplicate resource", "resources:\n" + widget("apps", "w", "/a/") + widget("apps", "w", "/b/"), 7, "duplicate resource apps/w"},
		{"same prefix", "resources:\n" + widget("apps", "w", "/a/") + widget("apps", "x", "/a/"), 9, `prefix "/a/" of apps/x overlaps prefix "/a/" of apps/w (line 4)`},
		{"prefix of earlier", "resources:\n" + widget("apps", "w", "/a/b/") + widget("apps", "x", "/a/"), 9, `prefix "/a/" of apps/x overlaps prefix "/a/b/" of apps/w (line 4)`},
		{"root prefix", "resources:\n" + widget("apps", "w", "/a/") + widget("core", "w", "/"), 9, `prefix "/" of core/w overlaps`},
		{"missing conversion", head + "    versions:\n      - name: v1\n        served: true\n      - name: v2\n    conversions: []\n", 10, "resource apps/widgets has no conversion v1 -> v2"},
		{"missing middle conversion", head + "    versions: [{name: v1, served: true}, {name: v2}, {name: v3}]\n    conversions:\n      - {from: v1, to: v2}\n", 8, "has no conversion v2 -> v3"},
		{"conversions not list", v1v2[:strings.Index(v1v2, "      - from")] + "      from: v1\n", 12, "conversions must be a list"},
		{"conversion not adjacent", head + "    versions: [{name: v1, served: true}, {name: v2}, {name: v3}]\n    conversions:\n      - {from: v1, to: v3}\n", 8, "conversion v1 -> v3 is not between adjacent versions"},
		{"conversion backwards", head + "    versions: [{name: v1, served: true}, {name: v2}]\n    conversions:\n      - {from: v2, to: v1}\n", 8, "conversion v2 -> v1 is not between adjacent versions"},
		{"conversion with one version", head + "    versions: [{name: v1, served: true}]\n    conversions:\n      - {from: v1, to: v1}\n", 8, "not between adjacent versions"},
		{"conversion unknown from", head + "    versions: [{name: v1, served: true}, {name: v2}]\n    conversions:\n      - from: v0\n        to: v1\n", 8, `conversion from "v0": not a declared version of apps/widgets`},
		{"conversion unknown to", head + "    versions: [{name: v1, served: true}, {name: v2}]\n    conversions:\n      - from: v2\n        to: v3\n", 9, `conversion to "v3": not a declared version`},
		{"conversion without to", head + "    versions: [{name: v1, served: true}, {name: v2}]\n    conversions:\n      - from: v1\n", 8, "conversion needs both from and to"},
		{"duplicate conversion", head + "    versions: [{name: v1, served: true}, {name: v2}]\n    conversions:\n      - {from: v1, to: v2}\n      - {from: v1, to: v2}\n", 9, "duplicate conversion v1 -> v2 (first at line 8)"},
		{"conversions out of order", head + "    versions: [{name: v1, served: true}, {name: v2}, {name: v3}]\n    conversions:\n      - {from: v2, to: v3}\n      - {from: v1, to: v2}\n", 8, "conversion v2 -> v3 is out of order"},
		{"unknown conversion field", head + "    versions: [{name: v1, served: true}, {name: v2}]\n    conversions:\n      - {from: v1, to: v2, lossy: true}\n", 8, `unknown field "lossy"`},
		{"ops not list", v1v2 + "            rename: x\n", 15, "ops must be a list"},
		{"op not mapping", ops1("rename"), 15, "op must be a mapping"},
		{"empty op", ops1("{}"), 15, "op must have exactly one of rename, default, drop"},
		{"two op kinds", ops1("{rename: {from: a, to: b}, drop: {field: c, lossy: true}}"), 15, "op must have exactly one of rename, default, drop"},
		{"unknown op", ops1("move: {from: a, to: b}"), 15, `unknown field "move"`},
		{"drop not lossy", ops1("drop: {field: spec.legacy}"), 15, "drop of spec.legacy loses data: mark it lossy: true"},
		{"drop lossy false", ops1("drop: {field: spec.legacy, lossy: false}"), 15, "drop of spec.legacy loses data: mark it lossy: true"},
		{"drop lossy not bool", ops1("drop: {field: spec.legacy, lossy: maybe}"), 15, "lossy must be true or false"},
		{"drop no field", ops1("drop: {lossy: true}"), 15, "field: empty path"},
		{"drop metadata", ops1("drop: {field: metadata.labels.x, lossy: true}"), 15, `field: path "metadata.labels.x" may not touch metadata`},
		{"drop metadata itself", ops1("drop: {field: metadata, lossy: true}"), 15, `may not touch metadata`},
		{"rename unknown field", ops1("rename: {from: a, to: b, lossy: true}"), 15, `unknown field "lossy"`},
		{"rename not mapping", ops1("rename: a"), 15, "rename must be a mapping"},
		{"rename no from", ops1("rename: {to: b}"), 15, "from: empty path"},
		{"rename no to", ops1("rename: {from: a}"), 15, "to: empty path"},
		{"rename empty segment", ops1("rename: {from: spec..size, to: b}"), 15, `from: path "spec..size" has an empty segment`},
		{"rename trailing dot", ops1("rename: {from: a, to: spec.}"), 15, `to: path "spec." has an empty segment`},
		{"rename leading dot", ops1("rename: {from: .a, to: b}"), 15, "has an empty segment"},
		{"rename to apiVersion", ops1("rename: {from: spec.version, to: apiVersion}"), 15, `to: path "apiVersion" may not touch apiVersion`},
		{"rename from apiVersion child", ops1("rename: {from: apiVersion.x, to: b}"), 15, "may not touch apiVersion"},
		{"rename from metadata", ops1("rename: {from: metadata.name, to: spec.name}"), 15, "may not touch metadata"},
		{"rename same", ops1("rename: {from: spec.a, to: spec.a}"), 15, "rename spec.a -> spec.a: the paths overlap"},
		{"rename into child", ops1("rename: {from: spec.a, to: spec.a.b}"), 15, "the paths overlap"},
		{"rename into parent", ops1("rename: {from: spec.a.b, to: spec}"), 15, "the paths overlap"},
		{"rename path not string", ops1("rename: {from: [a], to: b}"), 15, "from must be a string"},
		{"default no value", ops1("default: {field: spec.color}"), 15, "default of spec.color has no value"},
		{"default no field", ops1("default: {value: 1}"), 15, "field: empty path"},
		{"default metadata", ops1("default: {field: metadata.labels, value: {}}"), 15, "may not touch metadata"},
		{"default unknown field", ops1("default: {field: a, value: 1, lossy: true}"), 15, `unknown field "lossy"`},
		{"default nan", ops1("default: {field: a, value: .nan}"), 15, `number ".nan" is not representable in JSON`},
		{"default inf", ops1("default: {field: a, value: -.inf}"), 15, "not representable in JSON"},
		{"default custom tag", ops1("default: {field: a, value: !thing x}"), 15, "unsupported YAML tag !thing"},
		{"default duplicate key", ops1("default: {field: a, value: {x: 1, x: 2}}"), 15, `duplicate key "x"`},
		{"default complex key", ops1("default: {field: a, value: {[x]: 1}}"), 15, "object keys in values must be strings"},
		{"alias", "resources:\n  - &r {group: apps}\n  - *r\n", 3, "YAML aliases are not supported"},
		{"merge key", ops1("default: {field: a, value: {<<: {x: 1}}}"), 15, "YAML merge keys are not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSchema("x.yaml", []byte(tt.data))
			if err == nil {
				t.Fatalf("no error; got %+v", s)
			}
			if s != nil {
				t.Errorf("schema not nil on error")
			}
			if !errors.Is(err, ErrBadSchema) {
				t.Errorf("error %v does not wrap ErrBadSchema", err)
			}
			prefix := "x.yaml:" + strconv.Itoa(tt.line) + ": "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant prefix %q containing %q", err, prefix, tt.want)
			}
		})
	}
}

func TestParseSchemaTooBig(t *testing.T) {
	data := []byte("resources: []\n" + strings.Repeat(" ", MaxSchemaSize))
	_, err := ParseSchema("big.yaml", data)
	if !errors.Is(err, ErrBadSchema) || !strings.HasPrefix(err.Error(), "big.yaml:1: schema file is") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseSchemaValues(t *testing.T) {
	data := ops1("default: {field: spec.x, value: {s: str, q: \"3\", i: 0x10, f: 1.5, b: false, n: ~, t: 2001-12-14, l: [[]], e: {}}}")
	s, err := ParseSchema("v.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Resources[0].Conversions[0].Ops[0].Value
	want := map[string]any{"s": "str", "q": "3", "i": 16.0, "f": 1.5, "b": false, "n": nil, "t": "2001-12-14",
		"l": []any{[]any{}}, "e": map[string]any{}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("value = %#v", got)
	}
}

func TestParseSchemaServedDefaultsFalse(t *testing.T) {
	s, err := ParseSchema("s.yaml", []byte(head+"    versions: [{name: v0}, {name: v1, served: true}]\n    conversions: [{from: v0, to: v1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Resources[0]
	if !reflect.DeepEqual(r.Served(), []string{"v1"}) || !reflect.DeepEqual(r.Decodable(), []string{"v0", "v1"}) {
		t.Fatalf("served %v decodable %v", r.Served(), r.Decodable())
	}
	if len(r.Conversions) != 1 || r.Conversions[0].Ops != nil {
		t.Fatalf("conversions %+v", r.Conversions)
	}
}

func TestNilSchema(t *testing.T) {
	var s *Schema
	if s.Lookup("a", "b") != nil || s.ByPrefix("/x") != nil {
		t.Fatal("nil schema lookups")
	}
}
