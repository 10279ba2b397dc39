package resources

import (
	"errors"
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/versions"
)

// FuzzResourceObject: any PUT body either fails as a 400 (ErrInvalidBody) or yields an
// object with the path's apiVersion and name and no metadata.revision or
// metadata.downgraded, which PrepareWrite either refuses (ErrConversion) or stores in
// a form that reads back in every served version.
func FuzzResourceObject(f *testing.F) {
	s, err := versions.LoadSchema("../httpapi/testdata/widgets-v1v2.yaml")
	if err != nil {
		f.Fatal(err)
	}
	q := request{r: s.Resources[0], version: "v1", name: "w"}
	for _, seed := range []string{`{}`, `{"spec":{"size":3}}`, `{"apiVersion":"apps/v1","metadata":{"name":"w","revision":7}}`,
		`{"metadata":{"revision":"7"}}`, `{"spec":{"size":1,"replicas":2}}`, `[1]`, `{"spec":[]}`, `{"metadata":null}`,
		`{"metadata":{"downgraded":true}}`, `{"metadata":{"downgraded":"yes"}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, rev, _, err := validateObject(q, body)
		if err != nil {
			if !errors.Is(err, kv.ErrInvalidBody) {
				t.Fatalf("error %v is not ErrInvalidBody", err)
			}
			return
		}
		meta := obj["metadata"].(map[string]any)
		if obj["apiVersion"] != "apps/v1" || meta["name"] != "w" || meta["revision"] != nil || meta["downgraded"] != nil || rev < 0 {
			t.Fatalf("accepted %s as %v (revision %d)", body, obj, rev)
		}
		w, err := q.r.PrepareWrite(obj, "v1", nil, "", "v2")
		if err != nil {
			if !errors.Is(err, versions.ErrConversion) {
				t.Fatalf("%s: %v", body, err)
			}
			return // the handler answers 400
		}
		for _, v := range q.r.Served() {
			if _, _, err := q.r.View(w.Object, "v2", v, "v2"); err != nil {
				t.Fatalf("%s: stored as %v, not readable as %s: %v", body, w.Object, v, err)
			}
		}
	})
}
