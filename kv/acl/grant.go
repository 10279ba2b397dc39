package acl

import (
	"fmt"

	"github.com/keel-kv/keel/kv/api"
)

// No escalation. A token with the acl right manages tokens and policies, but only
// within its own rights: every door that writes ACL records asks CheckGrant first.
//
//   - a policy it writes may grant only rights it holds itself (else it could write a
//     policy for its own token, or for a token it then creates);
//   - a token it creates may carry only policies within its rights;
//   - a token it deletes may hold only rights it holds (a lesser token cannot remove
//     the management token);
//   - the management policy is built in: no token changes or deletes it
//     (CheckPolicyWritable), so a management token always keeps every right.
//
// A right is held when one of the caller's rules covers it: a key rule whose key range
// holds every key of the rule's (a prefix of its prefix) with at least its access
// (write covers read), a resource rule on
// "*" or the same group and resource, the operator right itself or "*".
//
//	caller: keys app/ write, operator acl
//	policy keys app/x read          → within
//	policy keys "" read             → beyond ("" is not under app/)
//	policy operator snapshot, or *  → beyond

// Beyond returns a description of the first right p grants that a does not hold, or
// "" when a holds them all (a nil Authorizer holds everything).
func (a *Authorizer) Beyond(p api.ACLPolicy) string {
	if a == nil {
		return ""
	}
	for _, k := range p.Keys {
		if !a.holdsKeys(k) {
			if k.Key != "" {
				return fmt.Sprintf("%s on keys [%q, %q)", k.Access, k.Key, k.End)
			}
			return fmt.Sprintf("%s on keys %q", k.Access, k.Prefix)
		}
	}
	for _, r := range p.Resources {
		if !a.holdsResource(r) {
			return fmt.Sprintf("%s on resource %s/%s", r.Access, r.Group, r.Resource)
		}
	}
	for _, o := range p.Operator {
		if !a.operator[api.RightAll] && (o == api.RightAll || !a.operator[o]) {
			return fmt.Sprintf("operator right %q", o)
		}
	}
	return ""
}

func (a *Authorizer) holdsKeys(k api.ACLKeyRule) bool {
	want := spanOf(k)
	for _, r := range a.spans {
		if includes(r.access, k.Access) && r.covers(want.start, want.end) {
			return true
		}
	}
	return false
}

func (a *Authorizer) holdsResource(k api.ACLResourceRule) bool {
	write := k.Access == api.AccessWrite
	for _, r := range a.resources {
		if grants(r.Access, write) && (r.Group == "*" || r.Group == k.Group) && (r.Resource == "*" || r.Resource == k.Resource) {
			return true
		}
	}
	return false
}

// CheckGrant refuses (ErrForbidden) to hand out or take away the rights of policies
// unless a holds every one of them. what says what the request does ("create a
// token").
func (a *Authorizer) CheckGrant(what string, policies ...api.ACLPolicy) error {
	for _, p := range policies {
		if d := a.Beyond(p); d != "" {
			return fmt.Errorf("%w: cannot %s: policy %q grants %s, which the calling token does not hold "+
				"(a token manages only rights it has)", ErrForbidden, what, p.Name, d)
		}
	}
	return nil
}
