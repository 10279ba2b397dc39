package acl

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// put writes key=value records into s in one transaction, as the ACL routes do.
func put(t *testing.T, s *fsm.Store, kvs map[string]any) {
	t.Helper()
	txn := &fsm.Txn{}
	for k, v := range kvs {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if raw, ok := v.(string); ok {
			b = []byte(raw) // a garbled record, stored as is
		}
		txn.Success = append(txn.Success, fsm.Op{Type: fsm.OpPut, Key: []byte(k), Value: b})
	}
	if res := s.ApplyCommand(s.AppliedIndex()+1, &fsm.Command{Type: fsm.CmdTxn, Txn: txn}); res.Err != nil {
		t.Fatal(res.Err)
	}
}

func del(t *testing.T, s *fsm.Store, key string) {
	t.Helper()
	txn := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpDelete, Key: []byte(key)}}}
	if res := s.ApplyCommand(s.AppliedIndex()+1, &fsm.Command{Type: fsm.CmdTxn, Txn: txn}); res.Err != nil {
		t.Fatal(res.Err)
	}
}

func newHash(t *testing.T) SecretHash {
	t.Helper()
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return HashSecret(secret)
}

// TestLoad builds a State from real records in an fsm store:
//
//	bootstrap                     → Bootstrapped
//	policies/app   keys app/ write
//	tokens/H1      policies [app, gone]    → rights of app only (gone does not exist)
//	tokens/H2      expired an hour ago     → found, Expired, Current refuses it
//	tokens/H3      garbled JSON            → skipped
//	tokens/nothex  a record                → skipped
//	tokens/H4      expiry "tomorrow"       → skipped (grants nothing)
//
// Then the policy changes and a token is deleted: Current follows the new State.
func TestLoad(t *testing.T) {
	s := fsm.NewStore()
	h1, h2, h3, h4 := newHash(t), newHash(t), newHash(t), newHash(t)
	app := api.ACLPolicy{Name: "app", Keys: []api.ACLKeyRule{{Prefix: "app/", Access: api.AccessWrite}}}
	put(t, s, map[string]any{
		BootstrapKey:                 BootstrapRecord{AccessorID: "a1", Time: "now"},
		PoliciesPrefix + "app":       app,
		TokensPrefix + h1.String():   TokenRecord{AccessorID: "a1", Policies: []string{"app", "gone"}},
		TokensPrefix + h2.String():   TokenRecord{AccessorID: "a2", Policies: []string{"app"}, ExpirationTime: time.Now().Add(-time.Hour).Format(time.RFC3339)},
		TokensPrefix + h3.String():   "{garbled",
		TokensPrefix + "nothex":      TokenRecord{AccessorID: "a3"},
		TokensPrefix + h4.String():   TokenRecord{AccessorID: "a4", ExpirationTime: "tomorrow"},
		"app/outside-the-acl-prefix": "x",
	})
	st, err := Load(s.View(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Bootstrapped() || st.Revision() != s.Revision() {
		t.Fatalf("bootstrapped %v revision %d, want true %d", st.Bootstrapped(), st.Revision(), s.Revision())
	}
	n := 0
	for range st.Tokens() {
		n++
	}
	if n != 2 || st.Lookup(h3) != nil || st.Lookup(h4) != nil {
		t.Fatalf("%d tokens (h3 %v, h4 %v), want h1 and h2 only", n, st.Lookup(h3), st.Lookup(h4))
	}
	t1 := st.Lookup(h1)
	if t1 == nil || t1.Record().AccessorID != "a1" || t1.Hash() != h1 {
		t.Fatalf("token h1 = %+v", t1)
	}
	az := t1.Authorizer()
	if !az.Key([]byte("app/x"), true) || az.Key([]byte("b"), false) || az.Accessor() != "a1" || az.Hash() != h1 {
		t.Fatalf("h1's rights: app/x write %v, b read %v, accessor %q", az.Key([]byte("app/x"), true), az.Key([]byte("b"), false), az.Accessor())
	}
	if p, ok := st.Policy("app"); !ok || p.Revision == 0 {
		t.Fatalf("policy app = %+v %v, want it with its revision", p, ok)
	}
	if cur, err := st.Current(az, time.Now()); err != nil || cur != az {
		t.Fatalf("Current(h1) = %v, %v, want its own authorizer", cur, err)
	}
	t2 := st.Lookup(h2)
	if _, err := st.Current(t2.Authorizer(), time.Now()); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Current(expired) = %v, want ErrUnauthorized naming the expiry", err)
	}

	// The policy loses app/ write; h1 is deleted after that.
	app.Keys[0].Access = api.AccessRead
	put(t, s, map[string]any{PoliciesPrefix + "app": app})
	st2, err := Load(s.View(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := st2.Current(az, time.Now()); err != nil || cur.Key([]byte("app/x"), true) || !cur.Key([]byte("app/x"), false) {
		t.Fatalf("Current after the policy change: %v; write app/x still allowed or read refused", err)
	}
	del(t, s, TokensPrefix+h1.String())
	st3, err := Load(s.View(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st3.Current(az, time.Now()); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), ErrUnknownToken.Error()) {
		t.Fatalf("Current of a deleted token = %v, want ErrUnauthorized (unknown token)", err)
	}
	if cur, err := st3.Current(nil, time.Now()); cur != nil || err != nil {
		t.Fatalf("Current(nil) = %v, %v, want nil, nil (ACLs not enforced)", cur, err)
	}
}

// TestLoadEmpty: no records, not bootstrapped; the guard reaches every Authorizer.
func TestLoadEmpty(t *testing.T) {
	st, err := Load(fsm.NewStore().View(), nil)
	if err != nil || st.Bootstrapped() {
		t.Fatalf("empty store: %v bootstrapped %v", err, st.Bootstrapped())
	}
	s := fsm.NewStore()
	h := newHash(t)
	put(t, s, map[string]any{
		PoliciesPrefix + "all":    api.ACLPolicy{Name: "all", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead}}},
		TokensPrefix + h.String(): TokenRecord{AccessorID: "a", Policies: []string{"all"}},
	})
	guard := func() []GuardRange { return []GuardRange{{Prefix: []byte("w/"), Group: "g", Resource: "r"}} }
	st, err = Load(s.View(), guard)
	if err != nil {
		t.Fatal(err)
	}
	if az := st.Lookup(h).Authorizer(); az.Key([]byte("w/x"), false) || !az.Key([]byte("v"), false) {
		t.Fatalf("guarded read w/x allowed, or v refused")
	}
}

// TestCheckGrant: a token hands out only rights it holds (see grant.go's drawing).
func TestCheckGrant(t *testing.T) {
	caller := NewAuthorizer(keys("app/", api.AccessWrite), api.ACLPolicy{Operator: []string{api.RightACL},
		Resources: []api.ACLResourceRule{{Group: "apps", Resource: "*", Access: api.AccessRead}}})
	tests := []struct {
		p      api.ACLPolicy
		beyond string // "" = within
	}{
		{keys("app/x", api.AccessRead), ""},
		{keys("app/", api.AccessWrite), ""},
		{keys("", api.AccessRead), `read on keys ""`},
		{keys("ap", api.AccessRead), `read on keys "ap"`},
		{api.ACLPolicy{Operator: []string{api.RightSnapshot}}, `operator right "snapshot"`},
		{api.ACLPolicy{Operator: []string{api.RightAll}}, `operator right "*"`},
		{api.ACLPolicy{Operator: []string{api.RightACL}}, ""},
		{api.ACLPolicy{Resources: []api.ACLResourceRule{{Group: "apps", Resource: "w", Access: api.AccessRead}}}, ""},
		{api.ACLPolicy{Resources: []api.ACLResourceRule{{Group: "apps", Resource: "w", Access: api.AccessWrite}}}, "write on resource apps/w"},
		{ManagementPolicy(), `write on keys ""`},
	}
	for i, tt := range tests {
		tt.p.Name = "p"
		if got := caller.Beyond(tt.p); got != tt.beyond {
			t.Errorf("#%d: Beyond = %q, want %q", i, got, tt.beyond)
		}
		err := caller.CheckGrant("create the token", tt.p)
		if (err == nil) != (tt.beyond == "") || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("#%d: CheckGrant = %v, want refused %v", i, err, tt.beyond != "")
		}
	}
	var none *Authorizer
	if err := none.CheckGrant("x", ManagementPolicy()); err != nil {
		t.Errorf("nil authorizer (ACLs not enforced): %v", err)
	}
	if NewAuthorizer(ManagementPolicy()).Beyond(ManagementPolicy()) != "" {
		t.Errorf("the management policy does not hold itself")
	}
}

// TestValidatePolicy: names, accesses and rights are checked before a policy is
// stored; the built-in policy is not writable.
func TestValidatePolicy(t *testing.T) {
	var pe *PolicyError
	bad := []api.ACLPolicy{
		{Name: ""},
		{Name: "-x"},
		{Name: strings.Repeat("a", 129)},
		{Name: "p", Keys: []api.ACLKeyRule{{Prefix: "a", Access: "all"}}},
		{Name: "p", Resources: []api.ACLResourceRule{{Group: "g", Resource: "r", Access: "rw"}}},
		{Name: "p", Resources: []api.ACLResourceRule{{Group: "", Resource: "r", Access: api.AccessRead}}},
		{Name: "p", Operator: []string{"root"}},
	}
	for i, p := range bad {
		if err := ValidatePolicy(p); !errors.As(err, &pe) {
			t.Errorf("#%d: ValidatePolicy(%+v) = %v, want a *PolicyError", i, p, err)
		}
	}
	if err := ValidatePolicy(ManagementPolicy()); err != nil {
		t.Errorf("the management policy: %v", err)
	}
	if err := CheckPolicyWritable(api.ManagementPolicy); !errors.As(err, &pe) {
		t.Errorf("CheckPolicyWritable(management) = %v, want a *PolicyError", err)
	}
	if err := CheckPolicyWritable("app"); err != nil {
		t.Errorf("CheckPolicyWritable(app) = %v", err)
	}
}
