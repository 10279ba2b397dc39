package acl

import (
	"slices"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

func keys(rules ...string) api.ACLPolicy {
	var p api.ACLPolicy
	for i := 0; i+1 < len(rules); i += 2 {
		p.Keys = append(p.Keys, api.ACLKeyRule{Prefix: rules[i], Access: rules[i+1]})
	}
	return p
}

// TestAuthorizerSpans draws the rules {read "", write "app/"} against ranges:
//
//	key "app/x" write            yes (under app/)
//	key "b" write                no  (read only)
//	[app/, app0) write           yes (exactly app/)
//	[app/, app1) write           no  (runs past app/)
//	[app/, end) write            no
//	\x00keel/acl/... read        no  (needs the acl right)
func TestAuthorizerSpans(t *testing.T) {
	az := NewAuthorizer(keys("", api.AccessRead, "app/", api.AccessWrite))
	checks := []struct {
		name string
		got  bool
		want bool
	}{
		{"write app/x", az.Key([]byte("app/x"), true), true},
		{"write b", az.Key([]byte("b"), true), false},
		{"read b", az.Key([]byte("b"), false), true},
		{"write [app/, app0)", az.Span([]byte("app/"), []byte("app0"), true), true},
		{"write [app/, app1)", az.Span([]byte("app/"), []byte("app1"), true), false},
		{"write [app/, end)", az.Span([]byte("app/"), nil, true), false},
		{"read everything", az.Span(nil, nil, false), false}, // the ACL records are in it
		{"read acl token record", az.Key([]byte(TokensPrefix+"ab"), false), false},
		{"some of [a, b)", az.Some([]byte("a"), []byte("b")), true},
		{"right compact", az.Right(api.RightCompact), false},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("#%d %s = %v, want %v", i, c.name, c.got, c.want)
		}
	}
	az = NewAuthorizer(keys("", api.AccessRead, "app/", api.AccessWrite), api.ACLPolicy{Operator: []string{api.RightACL}})
	if !az.Span(nil, nil, false) {
		t.Errorf("with the acl right, read of everything = false, want true")
	}
}

// TestNextReadable: where a filtered scan resumes, from the rules alone.
//
//	rules: read "b/", write "d/", read "" without the acl right (second authorizer)
func TestNextReadable(t *testing.T) {
	az := NewAuthorizer(keys("b/", api.AccessRead, "d/", api.AccessWrite))
	all := NewAuthorizer(keys("", api.AccessRead))
	tests := []struct {
		az       *Authorizer
		key, end string
		want     string
		wantNone bool
	}{
		{az, "a", "", "b/", false},
		{az, "b/x", "", "b/x", false},
		{az, "c", "", "d/", false},
		{az, "c", "d/", "", true},
		{az, "e", "", "", true},
		{all, Prefix + "tokens/x", "", string(fsm.PrefixEnd([]byte(Prefix))), false},
		{all, "k", "", "k", false},
		{nil, "k", "", "k", false},
	}
	for i, tt := range tests {
		got := tt.az.NextReadable([]byte(tt.key), []byte(tt.end))
		if (got == nil) != tt.wantNone || (got != nil && string(got) != tt.want) {
			t.Errorf("#%d: NextReadable(%q, %q) = %q, want %q (none %v)", i, tt.key, tt.end, got, tt.want, tt.wantNone)
		}
	}
}

// TestGuardedDecisions: raw reads of a typed resource's keys need the right on the
// resource, in every decision that names keys.
//
//	schema: widgets (apps) under "w/", its key migration to "v2/w/"; gadgets under "g/"
//	reader: read "" (keys), read apps/gadgets
//	writer: write "" (keys), write apps/* (resources)
//
//	reader Key("w/a")           no   (widgets' range, no widgets right)
//	reader Key("v2/w/a")        no   (the migration's new range is widgets' too)
//	reader Key("g/a")           yes  (gadgets readable)
//	reader Key("x")             yes  (no resource there)
//	reader Span("a", "z")       no   (meets w/)
//	reader Span("g/", "g0")     yes
//	reader Some("w/", "w0")     yes  (Some asks the key rules alone: the scan filters by Key)
//	reader NextReadable("w/a")  "w0" (past widgets' range)
//	reader NextReadable("v2/w/a", end "v2/w0") none
//	writer Key("w/a", write)    yes
func TestGuardedDecisions(t *testing.T) {
	ranges := []GuardRange{
		{Prefix: []byte("w/"), Group: "apps", Resource: "widgets"},
		{Prefix: []byte("v2/w/"), Group: "apps", Resource: "widgets"},
		{Prefix: []byte("g/"), Group: "apps", Resource: "gadgets"},
	}
	guard := func() []GuardRange { return ranges }
	reader := NewAuthorizer(keys("", api.AccessRead),
		api.ACLPolicy{Resources: []api.ACLResourceRule{{Group: "apps", Resource: "gadgets", Access: api.AccessRead}}}).WithGuard(guard)
	writer := NewAuthorizer(keys("", api.AccessWrite),
		api.ACLPolicy{Resources: []api.ACLResourceRule{{Group: "apps", Resource: "*", Access: api.AccessWrite}}}).WithGuard(guard)
	b := func(s string) []byte { return []byte(s) }
	checks := []struct {
		name      string
		got, want bool
	}{
		{"reader key w/a", reader.Key(b("w/a"), false), false},
		{"reader key v2/w/a", reader.Key(b("v2/w/a"), false), false},
		{"reader key g/a", reader.Key(b("g/a"), false), true},
		{"reader key x", reader.Key(b("x"), false), true},
		{"reader span [a, z)", reader.Span(b("a"), b("z"), false), false},
		{"reader span [g/, g0)", reader.Span(b("g/"), b("g0"), false), true},
		{"reader write g/a", reader.Key(b("g/a"), true), false},
		{"reader some [w/, w0)", reader.Some(b("w/"), b("w0")), true},
		{"writer write w/a", writer.Key(b("w/a"), true), true},
		{"writer span write [v2/, v3)", writer.Span(b("v2/"), b("v3"), true), true},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("#%d %s = %v, want %v", i, c.name, c.got, c.want)
		}
	}
	next := []struct{ key, end, want string }{
		{"w/a", "", "w0"},
		{"v2/w/a", "", "v2/w0"},
		{"v2/w/a", "v2/w0", ""},
		{"g/a", "", "g/a"},
	}
	for i, n := range next {
		got := reader.NextReadable(b(n.key), b(n.end))
		if string(got) != n.want || (n.want == "") != (got == nil) {
			t.Errorf("#%d: NextReadable(%q, %q) = %q, want %q", i, n.key, n.end, got, n.want)
		}
	}
}

// TestResourceRightsAnyWrite: resource rules match "*" or the exact group and
// resource, write covers read; AnyWrite needs a key rule with write; nil allows all.
func TestResourceRightsAnyWrite(t *testing.T) {
	az := NewAuthorizer(keys("a/", api.AccessRead), api.ACLPolicy{
		Resources: []api.ACLResourceRule{{Group: "apps", Resource: "*", Access: api.AccessRead},
			{Group: "*", Resource: "gadgets", Access: api.AccessWrite}},
		Operator: []string{api.RightSnapshot},
	})
	var none *Authorizer
	checks := []struct {
		name      string
		got, want bool
	}{
		{"read apps/widgets", az.Resource("apps", "widgets", false), true},
		{"write apps/widgets", az.Resource("apps", "widgets", true), false},
		{"write other/gadgets", az.Resource("other", "gadgets", true), true},
		{"read other/widgets", az.Resource("other", "widgets", false), false},
		{"any write", az.AnyWrite(), false},
		{"right snapshot", az.Right(api.RightSnapshot), true},
		{"right acl", az.Right(api.RightACL), false},
		{"nil: write anything", none.Resource("x", "y", true) && none.AnyWrite() && none.Right(api.RightACL) &&
			none.Key([]byte(Prefix), true) && none.Span(nil, nil, true) && none.Some(nil, nil), true},
		{"all rights", NewAuthorizer(api.ACLPolicy{Operator: []string{api.RightAll}}).Right(api.RightCompact), true},
		{"write rule: any write", NewAuthorizer(keys("z/", api.AccessWrite)).AnyWrite(), true},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("#%d %s = %v, want %v", i, c.name, c.got, c.want)
		}
	}
}

// TestHoldsPolicies: a token holds the policies that grant it its rights, sorted and
// each once; HoldsPolicies asks for every one of them (the lease owner rule of kv).
func TestHoldsPolicies(t *testing.T) {
	a := NewAuthorizer(api.ACLPolicy{Name: "b"}, api.ACLPolicy{Name: "a"}, api.ACLPolicy{Name: "b"})
	if got := a.Policies(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Policies = %q, want [a b]", got)
	}
	for i, tc := range []struct {
		names []string
		want  bool
	}{
		{nil, true}, {[]string{"a"}, true}, {[]string{"a", "b"}, true}, {[]string{"a", "c"}, false}, {[]string{""}, false},
	} {
		if got := a.HoldsPolicies(tc.names); got != tc.want {
			t.Errorf("#%d: HoldsPolicies(%q) = %v, want %v", i, tc.names, got, tc.want)
		}
	}
	var none *Authorizer
	if none.Policies() != nil || !none.HoldsPolicies([]string{"a"}) {
		t.Error("a nil Authorizer (everything allowed) lists policies or does not hold one")
	}
}
