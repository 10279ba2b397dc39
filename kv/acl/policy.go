package acl

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/keel-kv/keel/kv/api"
)

var policyNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidatePolicy checks a policy before it is stored: its name, and that every rule
// has a known access and every operator right is known. The error is a *PolicyError.
func ValidatePolicy(p api.ACLPolicy) error {
	if !policyNamePattern.MatchString(p.Name) {
		return policyErrorf("policy name %q: want 1-128 of [A-Za-z0-9._-], starting with a letter or digit", p.Name)
	}
	for i, k := range p.Keys {
		if k.Access != api.AccessRead && k.Access != api.AccessWrite && k.Access != api.AccessWriteOnly {
			return policyErrorf("keys[%d].access %q: want %q, %q or %q", i, k.Access, api.AccessRead, api.AccessWrite,
				api.AccessWriteOnly)
		}
		if err := validateKeyRule(k); err != nil {
			return policyErrorf("keys[%d]: %v", i, err)
		}
	}
	for i, r := range p.Resources {
		if r.Access != api.AccessRead && r.Access != api.AccessWrite {
			return policyErrorf("resources[%d].access %q: want %q or %q", i, r.Access, api.AccessRead, api.AccessWrite)
		}
		if r.Group == "" || r.Resource == "" {
			return policyErrorf("resources[%d]: group and resource are required (\"*\" matches any)", i)
		}
	}
	for _, o := range p.Operator {
		if o != api.RightAll && !slices.Contains(api.OperatorRights, o) {
			return policyErrorf("operator right %q: want one of %v or %q", o, api.OperatorRights, api.RightAll)
		}
	}
	return nil
}

// validateKeyRule checks the shape of a key rule: a prefix, or a key range (etcd's
// rules, isValidPermissionRange: a non-empty key, and an end that sorts after it or
// is api.ACLFromKey), never both.
func validateKeyRule(k api.ACLKeyRule) error {
	switch {
	case k.Key == "" && k.End != "":
		return errors.New("an end needs a key")
	case k.Key != "" && k.Prefix != "":
		return errors.New("a rule has a prefix or a key, not both")
	case k.End != "" && k.End != api.ACLFromKey && k.End <= k.Key:
		return fmt.Errorf("end %q must sort after key %q (or be \"\\u0000\": every key from key on)", k.End, k.Key)
	}
	return nil
}

// ManagementPolicy is the built-in policy of the bootstrap token: every right.
func ManagementPolicy() api.ACLPolicy {
	return api.ACLPolicy{Name: api.ManagementPolicy, Description: "every right (created by bootstrap)",
		Keys:      []api.ACLKeyRule{{Prefix: "", Access: api.AccessWrite}},
		Resources: []api.ACLResourceRule{{Group: "*", Resource: "*", Access: api.AccessWrite}},
		Operator:  []string{api.RightAll}}
}

// CheckPolicyWritable refuses (*PolicyError) any change to the built-in management
// policy, so that a management token always holds every right.
func CheckPolicyWritable(name string) error {
	if name == api.ManagementPolicy {
		return policyErrorf("%q is built in and cannot be changed or deleted, so that a management "+
			"token always holds every right", name)
	}
	return nil
}
