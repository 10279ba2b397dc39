package kv

import (
	"errors"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

func TestParseBearer(t *testing.T) {
	good, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		header string
		want   error
	}{
		{"Bearer " + good, nil},
		{"bearer  " + good, nil},
		{"", errNoToken},
		{good, errMalformedToken},                           // no scheme
		{"Basic " + good, errMalformedToken},                // another scheme
		{"Bearer " + good[:len(good)-1], errMalformedToken}, // truncated
		{"Bearer " + good + "A", errMalformedToken},         // too long
		{"Bearer " + strings.Replace(good, "keel_", "keal_", 1), errMalformedToken},
		{"Bearer keel_" + strings.Repeat("!", 43), errMalformedToken}, // not base64url
		{"Bearer " + good + " ", errMalformedToken},
		{"Bearer " + strings.Repeat("x", 300), errMalformedToken},
	}
	for i, tt := range tests {
		got, err := parseBearer(tt.header)
		if !errors.Is(err, tt.want) {
			t.Errorf("#%d: err = %v, want %v", i, err, tt.want)
		}
		if err == nil && got != good {
			t.Errorf("#%d: secret = %q, want %q", i, got, good)
		}
		if err != nil && strings.Contains(err.Error(), good[5:]) {
			t.Errorf("#%d: error %q holds the secret", i, err)
		}
	}
}

// FuzzParseBearer: any header either parses to a secret of the exact shape newSecret
// makes, which the header contains, or fails with one of the two sentinels; it never
// panics, and an error never echoes the header.
func FuzzParseBearer(f *testing.F) {
	f.Add("Bearer keel_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("")
	f.Add("Bearer ")
	f.Fuzz(func(t *testing.T, header string) {
		s, err := parseBearer(header)
		if err != nil {
			// Only the fixed sentinels: nothing of the header reaches the message.
			if err != errNoToken && err != errMalformedToken {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if checkSecret(s) != nil || !strings.HasSuffix(header, s) || len(s) != secretLen {
			t.Fatalf("parsed %q from %q: not a well-formed secret of the header", s, header)
		}
	})
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
	az := &authorizer{operator: map[string]bool{},
		keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead}, {Prefix: "app/", Access: api.AccessWrite}}}
	checks := []struct {
		name string
		got  bool
		want bool
	}{
		{"write app/x", az.key([]byte("app/x"), true), true},
		{"write b", az.key([]byte("b"), true), false},
		{"read b", az.key([]byte("b"), false), true},
		{"write [app/, app0)", az.span([]byte("app/"), []byte("app0"), true), true},
		{"write [app/, app1)", az.span([]byte("app/"), []byte("app1"), true), false},
		{"write [app/, end)", az.span([]byte("app/"), nil, true), false},
		{"read everything", az.span(nil, nil, false), false}, // the ACL records are in it
		{"read acl token record", az.key([]byte(aclTokensPrefix+"ab"), false), false},
		{"some of [a, b)", az.some([]byte("a"), []byte("b")), true},
		{"right compact", az.right(api.RightCompact), false},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("#%d %s = %v, want %v", i, c.name, c.got, c.want)
		}
	}
	az.operator[api.RightACL] = true
	if !az.span(nil, nil, false) {
		t.Errorf("with the acl right, read of everything = false, want true")
	}
}

// FuzzPolicyBody: a PUT /v1/acl/policies body either fails to decode or validate with
// a 400-class error, or is a policy whose every rule has a known access and right; the
// rules it grants never reach the ACL records without the acl right.
func FuzzPolicyBody(f *testing.F) {
	f.Add(`{"name":"app","keys":[{"prefix":"app/","access":"write"}]}`)
	f.Add(`{"name":"ops","operator":["snapshot","*"]}`)
	f.Add(`{"name":"r","resources":[{"group":"*","resource":"widgets","access":"read"}]}`)
	f.Add(`{"name":"x","keys":[{"prefix":"","access":"all"}]}`)
	f.Add(`{"name":"","operator":["root"]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var p api.ACLPolicy
		if err := decodeJSON([]byte(body), &p); err != nil {
			if !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("decode error %v is not ErrInvalidBody", err)
			}
			return
		}
		if err := validatePolicy(p); err != nil {
			if !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("validate error %v is not ErrInvalidBody", err)
			}
			return
		}
		st := &aclState{policies: map[string]api.ACLPolicy{p.Name: p}}
		az := st.authorizerFor(tokenRecord{Policies: []string{p.Name}})
		if !az.right(api.RightACL) && (az.key([]byte(aclTokensPrefix+"00"), false) || az.span(nil, nil, false)) {
			t.Fatalf("policy %+v reaches the ACL records without the acl right", p)
		}
	})
}
