package versions

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func loadWidgets(t *testing.T, file string) *Resource {
	t.Helper()
	s, err := LoadSchema("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return s.Lookup("apps", "widgets")
}

// obj decodes a JSON object, as a caller would.
func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConvert(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2v3.yaml")
	labels := `{"tier": "web", "weight": 3, "on": true, "none": null, "list": [1, "two"]}`
	tests := []struct {
		name, from, to, in, want string
		lossy                    bool
	}{
		{"v1 to v2", "v1", "v2",
			`{"apiVersion": "apps/v1", "metadata": {"name": "w"}, "spec": {"size": 3, "legacy": "x", "keep": 1}}`,
			`{"apiVersion": "apps/v2", "metadata": {"name": "w"}, "spec": {"replicas": 3, "color": "blue", "keep": 1}}`, true},
		{"v1 to v2 nothing to drop", "v1", "v2",
			`{"spec": {"size": 3}}`,
			`{"apiVersion": "apps/v2", "spec": {"replicas": 3, "color": "blue"}}`, false},
		{"v1 to v2 default kept", "v1", "v2",
			`{"spec": {"color": "red"}}`,
			`{"apiVersion": "apps/v2", "spec": {"color": "red"}}`, false},
		{"v1 to v2 no spec", "v1", "v2",
			`{"metadata": {"name": "w"}}`,
			`{"apiVersion": "apps/v2", "metadata": {"name": "w"}, "spec": {"color": "blue"}}`, false},
		{"v1 to v3 chained", "v1", "v3beta1",
			`{"apiVersion": "apps/v1", "spec": {"size": 3, "legacy": "x"}}`,
			`{"apiVersion": "apps/v3beta1", "spec": {"scale": {"replicas": 3}, "color": "blue", "labels": ` + labels + `}}`, true},
		{"v2 to v3", "v2", "v3beta1",
			`{"apiVersion": "apps/v2", "spec": {"replicas": 5, "labels": {"a": "b"}}}`,
			`{"apiVersion": "apps/v3beta1", "spec": {"scale": {"replicas": 5}, "labels": {"a": "b"}}}`, false},
		{"v3 to v2", "v3beta1", "v2",
			`{"apiVersion": "apps/v3beta1", "spec": {"scale": {"replicas": 5}, "labels": {"a": "b"}, "color": "red"}}`,
			`{"apiVersion": "apps/v2", "spec": {"replicas": 5, "color": "red"}}`, true}, // labels {a: b} is not the default
		{"v3 to v2 default labels", "v3beta1", "v2",
			`{"apiVersion": "apps/v3beta1", "spec": {"scale": {"replicas": 5}, "labels": ` + labels + `}}`,
			`{"apiVersion": "apps/v2", "spec": {"replicas": 5}}`, false},
		{"v3 to v1 chained back", "v3beta1", "v1",
			`{"apiVersion": "apps/v3beta1", "spec": {"scale": {"replicas": 3}, "color": "blue", "labels": {}}}`,
			`{"apiVersion": "apps/v1", "spec": {"size": 3}}`, true},
		{"v2 to v1 loses nothing without data", "v2", "v1",
			`{"spec": {"color": "blue"}}`,
			`{"apiVersion": "apps/v1"}`, false},
		{"v2 to v1 keeps an empty object it did not empty", "v2", "v1",
			`{"spec": {}}`,
			`{"apiVersion": "apps/v1", "spec": {}}`, false},
		{"same version", "v2", "v2",
			`{"apiVersion": "apps/v2", "spec": {"size": 1, "legacy": true}}`,
			`{"apiVersion": "apps/v2", "spec": {"size": 1, "legacy": true}}`, false},
		{"same version sets apiVersion", "v1", "v1",
			`{"spec": {}}`,
			`{"apiVersion": "apps/v1", "spec": {}}`, false},
		{"non-object intermediate is absent for reads", "v1", "v2",
			`{"spec": {"size": {"deep": [1, {"x": 2}]}}, "status": "ok"}`,
			`{"apiVersion": "apps/v2", "spec": {"replicas": {"deep": [1, {"x": 2}]}, "color": "blue"}, "status": "ok"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := obj(t, tt.in)
			before := obj(t, tt.in)
			out, lossy, err := r.Convert(in, tt.from, tt.to)
			if err != nil {
				t.Fatal(err)
			}
			if want := obj(t, tt.want); !reflect.DeepEqual(out, want) {
				gj, _ := json.Marshal(out)
				t.Errorf("got  %s\nwant %s", gj, tt.want)
			}
			if lossy != tt.lossy {
				t.Errorf("lossy = %v, want %v", lossy, tt.lossy)
			}
			if !reflect.DeepEqual(in, before) {
				t.Errorf("input mutated: %v", in)
			}
		})
	}
}

func TestConvertRoundTrip(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2v3.yaml")
	v1 := obj(t, `{"apiVersion": "apps/v1", "metadata": {"name": "w"}, "spec": {"size": 2, "other": [1, 2]}}`)
	v3, lossy, err := r.Convert(v1, "v1", "v3beta1")
	if err != nil || lossy {
		t.Fatalf("forward: %v lossy=%v", err, lossy)
	}
	back, _, err := r.Convert(v3, "v3beta1", "v1")
	if err != nil {
		t.Fatal(err)
	}
	// Renames and defaults invert exactly: the intermediate object that the
	// rename created (spec.scale) goes when the inverse rename empties it.
	want := obj(t, `{"apiVersion": "apps/v1", "metadata": {"name": "w"}, "spec": {"size": 2, "other": [1, 2]}}`)
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip: %v", back)
	}
}

func TestConvertDoesNotShare(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2v3.yaml")
	in := obj(t, `{"spec": {"replicas": 1, "list": [{"a": 1}]}}`)
	out, _, err := r.Convert(in, "v2", "v3beta1")
	if err != nil {
		t.Fatal(err)
	}
	// Mutating the output must not reach the input or the schema's default.
	out["spec"].(map[string]any)["list"].([]any)[0].(map[string]any)["a"] = 9.0
	out["spec"].(map[string]any)["labels"].(map[string]any)["tier"] = "db"
	if in["spec"].(map[string]any)["list"].([]any)[0].(map[string]any)["a"] != 1.0 {
		t.Error("output shares a slice with the input")
	}
	out2, _, err := r.Convert(obj(t, `{}`), "v2", "v3beta1")
	if err != nil {
		t.Fatal(err)
	}
	if out2["spec"].(map[string]any)["labels"].(map[string]any)["tier"] != "web" {
		t.Error("output shares the default value with the schema")
	}
}

func TestConvertErrors(t *testing.T) {
	r := loadWidgets(t, "widgets-v1v2v3.yaml")
	tests := []struct {
		name, from, to string
		in             map[string]any
		want           error
		msg            string
	}{
		{"unknown from", "v9", "v1", map[string]any{}, ErrUnknownVersion, `"v9" of apps/widgets`},
		{"unknown to", "v1", "v2beta1", map[string]any{}, ErrUnknownVersion, `"v2beta1" of apps/widgets`},
		{"nil object", "v1", "v2", nil, ErrBadObject, "nil object"},
		{"apiVersion mismatch", "v1", "v2", map[string]any{"apiVersion": "apps/v2"}, ErrBadObject, "apiVersion apps/v2"},
		{"apiVersion other group", "v1", "v1", map[string]any{"apiVersion": "core/v1"}, ErrBadObject, "apiVersion core/v1"},
		{"apiVersion not string", "v1", "v2", map[string]any{"apiVersion": 1.0}, ErrBadObject, "apiVersion"},
		{"apiVersion map", "v1", "v2", map[string]any{"apiVersion": map[string]any{}}, ErrBadObject, "apiVersion"},
		{"not JSON", "v1", "v2", map[string]any{"spec": map[string]any{"x": []string{"a"}}}, ErrBadObject, "spec.x holds a []string"},
		{"not JSON in list", "v1", "v2", map[string]any{"l": []any{struct{}{}}}, ErrBadObject, "l[0] holds a struct {}"},
		{"rename into existing", "v1", "v2", map[string]any{"spec": map[string]any{"size": 1.0, "replicas": 2.0}}, ErrConversion,
			"rename spec.size -> spec.replicas (schema line 18): field spec.replicas already exists"},
		{"rename into existing null", "v1", "v2", map[string]any{"spec": map[string]any{"size": 1.0, "replicas": nil}}, ErrConversion,
			"field spec.replicas already exists"},
		{"backward rename into existing", "v2", "v1", map[string]any{"spec": map[string]any{"size": 1.0, "replicas": 2.0}}, ErrConversion,
			"apps/widgets v2 -> v1: rename spec.replicas -> spec.size (schema line 18): field spec.size already exists"},
		{"write through non-object", "v2", "v3beta1", map[string]any{"spec": map[string]any{"replicas": 1.0, "scale": "big"}}, ErrConversion,
			"writing spec.scale.replicas (schema line 24): spec.scale is not an object"},
		{"default through non-object", "v1", "v2", map[string]any{"spec": "x"}, ErrConversion,
			"writing spec.color (schema line 19): spec is not an object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, lossy, err := r.Convert(tt.in, tt.from, tt.to)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.want, tt.msg)
			}
			if out != nil || lossy {
				t.Errorf("out = %v, lossy = %v on error", out, lossy)
			}
		})
	}
}

func TestConvertSingleVersion(t *testing.T) {
	r := loadWidgets(t, "widgets-v2only.yaml")
	out, lossy, err := r.Convert(map[string]any{"spec": map[string]any{"a": 1}}, "v2", "v2")
	if err != nil || lossy {
		t.Fatal(err, lossy)
	}
	if !reflect.DeepEqual(out, map[string]any{"apiVersion": "apps/v2", "spec": map[string]any{"a": 1}}) {
		t.Fatalf("out = %v", out)
	}
	if _, _, err := r.Convert(map[string]any{}, "v2", "v1"); !errors.Is(err, ErrUnknownVersion) {
		t.Fatalf("v1: %v", err)
	}
}
