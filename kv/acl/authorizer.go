package acl

import (
	"bytes"
	"slices"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// Authorizer answers what one token may do. A nil *Authorizer allows everything (ACLs
// not enforced); every method is safe on nil. An Authorizer is immutable: a policy
// change makes a new State with new Authorizers ([State.Current] finds the new one).
type Authorizer struct {
	accessor  string
	user      string     // the user the token was issued to ("" for none)
	hash      SecretHash // of the token's secret: finds the token's current rights (State.Current)
	keys      []api.ACLKeyRule
	spans     []keySpan // keys' rules as key ranges, in the same order
	resources []api.ACLResourceRule
	operator  map[string]bool
	guard     Guard    // typed resources' key ranges (guard.go); nil: none
	policies  []string // names of the policies granting the rights, sorted, each once
}

// NewAuthorizer returns the rights the policies grant together, for no token in
// particular and with no Guard: the Authorizers of tokens come from [Load]. It is for
// checks of rules alone (and tests).
func NewAuthorizer(policies ...api.ACLPolicy) *Authorizer {
	a := &Authorizer{operator: map[string]bool{}}
	for _, p := range policies {
		a.policies = append(a.policies, p.Name)
		a.keys = append(a.keys, p.Keys...)
		for _, k := range p.Keys {
			a.spans = append(a.spans, spanOf(k))
		}
		a.resources = append(a.resources, p.Resources...)
		for _, r := range p.Operator {
			a.operator[r] = true
		}
	}
	slices.Sort(a.policies)
	a.policies = slices.Compact(a.policies)
	return a
}

// Policies returns the names of the policies that grant the token its rights, sorted,
// each once (a policy the token names that does not exist is not among them). The
// caller must not modify the slice.
func (a *Authorizer) Policies() []string {
	if a == nil {
		return nil
	}
	return a.policies
}

// HoldsPolicies reports whether every policy of names grants the token its rights
// (true for none; a nil Authorizer, which allows everything, holds them all).
func (a *Authorizer) HoldsPolicies(names []string) bool {
	if a == nil {
		return true
	}
	for _, n := range names {
		if _, ok := slices.BinarySearch(a.Policies(), n); !ok {
			return false
		}
	}
	return true
}

// WithGuard returns a copy of a that checks raw reads of typed resources' keys
// against g.
func (a *Authorizer) WithGuard(g Guard) *Authorizer {
	c := *a
	c.guard = g
	return &c
}

// Accessor is the public ID of the token ("" for no token).
func (a *Authorizer) Accessor() string {
	if a == nil {
		return ""
	}
	return a.accessor
}

// User is the user the token was issued to ("" for a token of no user, or none).
func (a *Authorizer) User() string {
	if a == nil {
		return ""
	}
	return a.user
}

// Hash is the hash of the token's secret: the caller's identity when a write is
// forwarded to the leader.
func (a *Authorizer) Hash() SecretHash {
	if a == nil {
		return SecretHash{}
	}
	return a.hash
}

func grants(access string, write bool) bool {
	if write {
		return access == api.AccessWrite || access == api.AccessWriteOnly
	}
	return access == api.AccessWrite || access == api.AccessRead
}

// includes reports whether access have grants all that want does.
func includes(have, want string) bool {
	return have == want || have == api.AccessWrite
}

// Right reports whether the token holds operator right r.
func (a *Authorizer) Right(r string) bool {
	return a == nil || a.operator[api.RightAll] || a.operator[r]
}

// Key reports whether the token may read (or write) key. The ACL records themselves
// need the acl right whatever the key rules say; a typed resource's keys need the
// right on the resource too (guard.go).
func (a *Authorizer) Key(key []byte, write bool) bool {
	if a == nil {
		return true
	}
	if bytes.HasPrefix(key, []byte(Prefix)) && !a.Right(api.RightACL) {
		return false
	}
	if a.guardedKey(key, write) {
		return false
	}
	for _, r := range a.spans {
		if grants(r.access, write) && r.holds(key) {
			return true
		}
	}
	return false
}

// Span reports whether the token may read (or write) every key of [start, end)
// (end empty = to the end of the keyspace): one rule must cover the whole range.
func (a *Authorizer) Span(start, end []byte, write bool) bool {
	if a == nil {
		return true
	}
	if overlaps(start, end, []byte(Prefix)) && !a.Right(api.RightACL) {
		return false
	}
	if a.guardedSpan(start, end, write) {
		return false
	}
	for _, r := range a.spans {
		if grants(r.access, write) && r.covers(start, end) {
			return true
		}
	}
	return false
}

// Some reports whether the token may read at least one key of [start, end): a list
// or watch of the range is then served, filtered by Key.
func (a *Authorizer) Some(start, end []byte) bool {
	if a == nil {
		return true
	}
	for _, r := range a.spans {
		if grants(r.access, false) && r.meets(start, end) {
			return true
		}
	}
	return false
}

// NextReadable returns the smallest key >= key and < end (end empty = no end) the
// token may read by its rules, or nil when there is none. It is computed from the
// rules alone, never from the data: a scan that resumes there names no key the token
// cannot read.
//
//	rules: read "b/", read "d/"; no acl right
//	NextReadable("a")   = "b/"      (the next rule's prefix)
//	NextReadable("b/x") = "b/x"     (readable itself)
//	NextReadable("c")   = "d/"
//	NextReadable("e")   = nil
func (a *Authorizer) NextReadable(key, end []byte) []byte {
	if key == nil {
		key = []byte{} // the start of the keyspace, told apart from "none"
	}
	if a == nil {
		return key
	}
	// Each round returns, or moves past the ACL records (without the acl right) or a
	// resource's range the token may not read, or to the next rule's prefix: bounded
	// by the number of those.
	for range 3 + len(a.keys) + len(a.guards()) {
		if len(end) > 0 && bytes.Compare(key, end) >= 0 {
			return nil
		}
		if a.Key(key, false) {
			return key
		}
		var next []byte
		if bytes.HasPrefix(key, []byte(Prefix)) && !a.Right(api.RightACL) {
			next = fsm.PrefixEnd([]byte(Prefix))
		} else if past := a.pastGuarded(key); past != nil {
			if len(past) == 0 {
				return nil
			}
			key = past
			continue
		}
		for _, r := range a.spans {
			p := r.start
			if grants(r.access, false) && bytes.Compare(p, key) > 0 && (next == nil || bytes.Compare(p, next) < 0) {
				next = p
			}
		}
		if next == nil {
			return nil
		}
		key = next
	}
	return nil
}

// keySpan is a key rule as the key range it grants: [start, end), end nil = to the
// end of the keyspace. A prefix rule is [prefix, its end); an etcd range rule is
// [key, end), an exact one [key, key+"\x00"), a from-key one [key, no end).
type keySpan struct {
	start, end []byte
	access     string
}

func spanOf(r api.ACLKeyRule) keySpan {
	switch {
	case r.Key == "":
		return keySpan{start: []byte(r.Prefix), end: fsm.PrefixEnd([]byte(r.Prefix)), access: r.Access}
	case r.End == "":
		return keySpan{start: []byte(r.Key), end: append([]byte(r.Key), 0), access: r.Access}
	case r.End == api.ACLFromKey:
		return keySpan{start: []byte(r.Key), access: r.Access}
	}
	return keySpan{start: []byte(r.Key), end: []byte(r.End), access: r.Access}
}

// holds reports whether key is in the span.
func (r keySpan) holds(key []byte) bool {
	return bytes.Compare(key, r.start) >= 0 && (r.end == nil || bytes.Compare(key, r.end) < 0)
}

// covers reports whether every key of [start, end) (end empty = no end) is in the span.
func (r keySpan) covers(start, end []byte) bool {
	return bytes.Compare(start, r.start) >= 0 && (r.end == nil || (len(end) > 0 && bytes.Compare(end, r.end) <= 0))
}

// meets reports whether [start, end) (end empty = no end) and the span share a key.
func (r keySpan) meets(start, end []byte) bool {
	return (r.end == nil || bytes.Compare(start, r.end) < 0) && (len(end) == 0 || bytes.Compare(end, r.start) > 0)
}

// overlaps reports whether [start, end) (end empty = no end) meets the keys with
// prefix p.
func overlaps(start, end, p []byte) bool {
	pe := fsm.PrefixEnd(p)
	return (pe == nil || bytes.Compare(start, pe) < 0) && (len(end) == 0 || bytes.Compare(end, p) > 0)
}

// Resource reports whether the token may read (or write) objects of group/resource.
func (a *Authorizer) Resource(group, resource string, write bool) bool {
	if a == nil {
		return true
	}
	for _, r := range a.resources {
		if grants(r.Access, write) && (r.Group == "*" || r.Group == group) &&
			(r.Resource == "*" || r.Resource == resource) {
			return true
		}
	}
	return false
}

// AnyWrite reports whether the token may write some key (leases are for writers).
func (a *Authorizer) AnyWrite() bool {
	if a == nil {
		return true
	}
	for _, r := range a.spans {
		if grants(r.access, true) {
			return true
		}
	}
	return false
}
