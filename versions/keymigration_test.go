package versions

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

const kmSchema = `resources:
  - group: apps
    name: widgets
    prefix: /registry/apps/widgets/
    preferredVersion: v1
    versions:
      - name: v1
        served: true
    keyMigrations:
%s`

func TestKeyMigrationParse(t *testing.T) {
	s, err := LoadSchema("testdata/widgets-keymig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k, r := s.KeyMigrationNamed("widgets-v2-keys")
	if k == nil || r.Key() != "apps/widgets" || k.To != "/registry/apps/v2/widgets/" || len(k.Ops) != 1 {
		t.Fatalf("key migration = %+v", k)
	}
	if !s.OwnsKey("/registry/apps/v2/widgets/w1") || s.OwnsKey("/registry/apps/v3/x") {
		t.Error("OwnsKey does not cover exactly the prefix and the new range")
	}
	nk := k.NewKey([]byte("/registry/apps/widgets/w1"))
	if string(nk) != "/registry/apps/v2/widgets/w1" || string(k.OldKey(nk)) != "/registry/apps/widgets/w1" {
		t.Errorf("NewKey/OldKey = %s / %s", nk, k.OldKey(nk))
	}
	v := []byte(`{"apiVersion":"apps/v1","metadata":{"name":"w1"},"spec":{"size":3}}`)
	nv, err := k.ToNew(v)
	if err != nil || !strings.Contains(string(nv), `"count":3`) || strings.Contains(string(nv), "size") {
		t.Fatalf("ToNew = %s, %v", nv, err)
	}
	back, err := k.ToOld(nv)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	json.Unmarshal(v, &a)
	json.Unmarshal(back, &b)
	if !jsonEqual(a, b) {
		t.Errorf("ToOld(ToNew(v)) = %s, want %s", back, v)
	}
	if k.Lossy() {
		t.Error("a rename is not lossy")
	}
	if k.Auto || k.MinDwell != 0 {
		t.Errorf("advance defaults to manual: %+v", k)
	}
	s, err = ParseSchema("s.yaml", []byte(strings.Replace(kmSchema, "%s",
		"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n        advance: auto\n        minDwell: 90s\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := s.KeyMigrationNamed("m"); !k.Auto || k.MinDwell != 90*time.Second || k.AutoFinalize {
		t.Errorf("advance: auto, minDwell: 90s parsed as %+v (autoFinalize defaults to false)", k)
	}
	s, err = ParseSchema("s.yaml", []byte(strings.Replace(kmSchema, "%s",
		"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n        advance: auto\n        autoFinalize: true\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := s.KeyMigrationNamed("m"); !k.Auto || !k.AutoFinalize {
		t.Errorf("advance: auto, autoFinalize: true parsed as %+v", k)
	}
}

// TestKeyMigrationBadDeclaration: each malformed declaration stops the parse with the
// line that is wrong.
func TestKeyMigrationBadDeclaration(t *testing.T) {
	for i, tc := range []struct{ decl, want string }{
		{"      - name: Bad_Name\n        from: /registry/apps/widgets/\n        to: /n/\n", ":10: key migration name"},
		{"      - name: m\n        from: /registry/other/\n        to: /n/\n", ":11: key migration m: from"},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: n/\n", ":12: key migration m: to \"n/\" must"},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: /registry/apps/widgets/v2/\n", ":12: key migration m: to"},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n        ops:\n          - drop: {field: spec.x}\n",
			":14: drop of spec.x loses data"},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n      - name: m2\n        from: /registry/apps/widgets/\n        to: /o/\n",
			":13: resource apps/widgets declares 2 key migrations"},
		{"      - name: m\n        frm: /registry/apps/widgets/\n", `:11: unknown field "frm"`},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n        advance: sometimes\n",
			`:13: key migration m: advance "sometimes"`},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n        minDwell: 5m\n",
			":13: key migration m: minDwell is for advance: auto"},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n        autoFinalize: true\n",
			":13: key migration m: autoFinalize is for advance: auto"},
		{"      - name: m\n        from: /registry/apps/widgets/\n        to: /n/\n        advance: auto\n        minDwell: soon\n",
			`:14: key migration m: minDwell "soon"`},
	} {
		_, err := ParseSchema("s.yaml", []byte(strings.Replace(kmSchema, "%s", tc.decl, 1)))
		if !errors.Is(err, ErrBadSchema) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("#%d: err = %v, want ErrBadSchema containing %q", i, err, tc.want)
		}
	}
}

// TestKeyPlan draws the RFD 126 table: where each phase reads and writes.
func TestKeyPlan(t *testing.T) {
	two := 2
	for i, tc := range []struct {
		rec  *api.KeyPhaseRecord
		want KeyPlan
		list bool // lists the new range
	}{
		{nil, KeyPlan{WriteOld: true}, false},
		{&api.KeyPhaseRecord{Phase: 1}, KeyPlan{WriteOld: true, WriteNew: true}, false},
		{&api.KeyPhaseRecord{Phase: 2}, KeyPlan{ReadNew: true, Fallback: true, WriteOld: true, WriteNew: true}, false},
		{&api.KeyPhaseRecord{Phase: 3}, KeyPlan{ReadNew: true, Fallback: true, WriteOld: true, WriteNew: true}, false},
		{&api.KeyPhaseRecord{Phase: 4}, KeyPlan{ReadNew: true, WriteNew: true}, true},
		{&api.KeyPhaseRecord{Phase: 4, RollbackTo: &two}, KeyPlan{ReadNew: true, WriteOld: true, WriteNew: true}, true},
		{&api.KeyPhaseRecord{Phase: 5}, KeyPlan{ReadNew: true, WriteNew: true}, true},
	} {
		got := Plan(tc.rec)
		if got != tc.want || got.ListNew() != tc.list {
			t.Errorf("#%d: Plan = %+v (lists new %v), want %+v (%v)", i, got, got.ListNew(), tc.want, tc.list)
		}
	}
}

// FuzzDecodeKeyPhase: a stored phase record (bytes from the Raft log) never panics the
// decoder, and whatever it accepts has a phase the plan table covers and a rollback
// target before phase 4.
func FuzzDecodeKeyPhase(f *testing.F) {
	for _, s := range []string{`{"name":"m","phase":3}`, `{"phase":4,"rollbackTo":2}`, `{"phase":9}`,
		`{"phase":4,"rollbackTo":4}`, `{"phase":-1}`, `null`, `{"phase":"2"}`, `{"last":{"from":1,"to":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeKeyPhase("m", b, 7)
		if err != nil {
			return
		}
		if rec.Phase < 0 || rec.Phase > api.KeyPhaseMax || rec.Name != "m" || rec.Revision != 7 {
			t.Fatalf("accepted %+v", rec)
		}
		if rec.RollbackTo != nil && (*rec.RollbackTo < 0 || *rec.RollbackTo > 3) {
			t.Fatalf("accepted rollback target %d", *rec.RollbackTo)
		}
		Plan(rec) // never panics
	})
}
