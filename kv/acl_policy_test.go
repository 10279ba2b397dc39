package kv

import (
	"errors"
	"testing"

	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

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
		if err := DecodeJSON([]byte(body), &p); err != nil {
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
		az := acl.NewAuthorizer(p)
		if !az.Right(api.RightACL) && (az.Key([]byte(acl.TokensPrefix+"00"), false) || az.Span(nil, nil, false)) {
			t.Fatalf("policy %+v reaches the ACL records without the acl right", p)
		}
	})
}
