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

// FuzzParseSchema checks that ParseSchema never panics, that its errors wrap
// ErrBadSchema and carry the file name, that it is deterministic, and that an
// accepted schema keeps the documented invariants and converts without
// panicking. Seeds: testdata/*.yaml (copied to testdata/fuzz/FuzzParseSchema).
func FuzzParseSchema(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSchema("f.yaml", data)
		s2, err2 := ParseSchema("f.yaml", data)
		if err != nil {
			if s != nil {
				t.Fatal("schema and error")
			}
			if !errors.Is(err, ErrBadSchema) || !strings.HasPrefix(err.Error(), "f.yaml:") {
				t.Fatalf("bad error %q", err)
			}
			if err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("not deterministic: %v then %v", err, err2)
			}
			return
		}
		if err2 != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("not deterministic: %+v then %v", s2, err2)
		}
		if len(s.Resources) == 0 {
			t.Fatal("no resources")
		}
		for i, r := range s.Resources {
			if i > 0 {
				p := s.Resources[i-1]
				if p.Group > r.Group || (p.Group == r.Group && p.Name >= r.Name) {
					t.Fatalf("resources not sorted and unique: %s, %s", p.Key(), r.Key())
				}
			}
			if s.Lookup(r.Group, r.Name) != r || s.ByPrefix(r.Prefix+"x") != r {
				t.Fatalf("lookup of %s", r.Key())
			}
			if len(r.Conversions) != len(r.Versions)-1 || !r.HasVersion(r.Preferred) || len(r.Served()) == 0 {
				t.Fatalf("invariants of %s: %+v", r.Key(), r)
			}
			// Walk every version to every other one, on an empty object.
			for _, from := range r.Decodable() {
				for _, to := range r.Decodable() {
					out, _, err := r.Convert(map[string]any{}, from, to)
					if err != nil {
						// A schema may chain ops that collide (default a,
						// then default a.b); that is a conversion error.
						if !errors.Is(err, ErrConversion) {
							t.Fatalf("%s %s -> %s: %v", r.Key(), from, to, err)
						}
						continue
					}
					if out["apiVersion"] != r.Group+"/"+to {
						t.Fatalf("apiVersion %v", out["apiVersion"])
					}
				}
			}
		}
	})
}

// TestFuzzSeedsCurrent checks that every testdata/*.yaml file has an
// up-to-date copy in the go-fuzz corpus directory.
func TestFuzzSeedsCurrent(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		seed := filepath.Join("testdata/fuzz/FuzzParseSchema", strings.TrimSuffix(filepath.Base(file), ".yaml"))
		got, err := os.ReadFile(seed)
		if err != nil || string(got) != want {
			t.Errorf("%s: missing or stale (err %v); regenerate it from %s", seed, err, file)
		}
	}
}

// FuzzPrepareWrite feeds PrepareWrite and View untrusted objects (a PUT body over a
// stored object) with every combination of versions that sel picks. Neither may
// panic; errors wrap ErrBadObject or ErrConversion; an accepted write that loses
// nothing reads in every served version and survives every read-and-write-back
// unchanged (the property of TestNoSilentLoss). Seeds: testdata/fuzz/FuzzPrepareWrite.
func FuzzPrepareWrite(f *testing.F) {
	r := allServedWidgets(f)
	f.Fuzz(func(t *testing.T, body, stored []byte, sel uint) {
		vs := r.Decodable()
		n := uint(len(vs))
		version, sv, enc := vs[sel%n], vs[sel/n%n], vs[sel/n/n%n]
		obj, err := DecodeObject(body)
		if err != nil {
			return
		}
		var st map[string]any
		if s, err := DecodeObject(stored); err == nil {
			st = s
			if _, _, err := r.View(st, sv, version, enc); err != nil && !errors.Is(err, ErrConversion) && !errors.Is(err, ErrBadObject) {
				t.Fatalf("View: %v", err)
			}
		}
		w, err := r.PrepareWrite(obj, version, st, sv, enc)
		if err != nil {
			if !errors.Is(err, ErrConversion) && !errors.Is(err, ErrBadObject) {
				t.Fatalf("PrepareWrite: %v", err)
			}
			return
		}
		if !w.Loses() {
			checkNoSilentLoss(t, r, 0, w.Object, enc)
		}
	})
}
