package acl

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// The records. The ACL system of a cluster is a set of records under Prefix, written
// through Raft like any key (CmdTxn; no command format of its own):
//
//	\x00keel/acl/bootstrap            {"accessor_id":..., "time":...}   created once (CAS on version 0)
//	\x00keel/acl/policies/NAME        api.ACLPolicy as JSON
//	\x00keel/acl/tokens/SHA256HEX     TokenRecord as JSON (the secret's hash names the key)
//	\x00keel/acl/users/NAME           UserRecord as JSON (users.go: the etcd door's users)
//
// Every node keeps a State built from these records (package kv rebuilds it when the
// watch hub reports a change under the prefix), so checking a request costs one
// SHA-256 and a map lookup. Enforcement starts when the bootstrap record exists, and
// pauses while it says Disabled (etcd's auth disable, users.go).
const (
	Prefix         = versions.SystemPrefix + "acl/"
	BootstrapKey   = Prefix + "bootstrap"
	PoliciesPrefix = Prefix + "policies/"
	TokensPrefix   = Prefix + "tokens/"
	UsersPrefix    = Prefix + "users/"
)

// TokenRecord is the stored form of a token: never its secret.
type TokenRecord struct {
	AccessorID  string   `json:"accessor_id"`
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies"`
	CreateTime  string   `json:"create_time"`
	// ExpirationTime (RFC 3339), when set, is when the token stops working.
	ExpirationTime string `json:"expiration_time,omitempty"`
	// User, when set, is the user the token was issued to (the etcd door's
	// Authenticate): its rights are those of the user's roles now, resolved on every
	// check (Policies is empty). Deleting the user or changing its password deletes
	// its tokens (package kv), so a token never outlives its user.
	User string `json:"user,omitempty"`
}

// BootstrapRecord is the stored bootstrap record: who bootstrapped, and when.
type BootstrapRecord struct {
	AccessorID string `json:"accessor_id"`
	Time       string `json:"time"`
	// Disabled: etcd's auth disable paused enforcement (users.go); the node's
	// -acl-default decides meanwhile, as before a bootstrap.
	Disabled bool `json:"disabled,omitempty"`
}

// State is one immutable snapshot of the ACL records. Readers share it (package kv
// publishes it through an atomic pointer) and never modify it.
type State struct {
	bootstrapped bool
	boot         BootstrapRecord
	bootRevision int64 // the bootstrap record's mod revision (0: none)
	revision     int64 // store revision it was read at
	tokens       map[SecretHash]*Token
	policies     map[string]api.ACLPolicy
	users        map[string]UserRecord
}

// Token is a token of a State with its rights resolved.
type Token struct {
	hash    SecretHash
	rec     TokenRecord
	authz   *Authorizer
	expires time.Time // zero: never
}

// Hash is the hash of the token's secret (what names its record).
func (t *Token) Hash() SecretHash { return t.hash }

// Record is the token's stored record.
func (t *Token) Record() TokenRecord { return t.rec }

// Authorizer is what the token may do.
func (t *Token) Authorizer() *Authorizer { return t.authz }

// Expired reports whether the token has expired at now.
func (t *Token) Expired(now time.Time) bool { return !t.expires.IsZero() && !now.Before(t.expires) }

// ExpiredError is the ErrUnauthorized of an expired token (it names when, never the
// secret).
func (t *Token) ExpiredError() error {
	return fmt.Errorf("%w: the token expired at %s", ErrUnauthorized, t.rec.ExpirationTime)
}

// Load reads the ACL records of view at its latest revision. A record that does not
// decode is skipped (and cannot grant anything); a token whose expiry does not parse
// grants nothing. Every Authorizer it makes checks raw reads of typed resources
// against guard (nil: no resources).
func Load(view *fsm.View, guard Guard) (*State, error) {
	rev := view.Revision()
	kvs, _, err := view.Range([]byte(Prefix), fsm.PrefixEnd([]byte(Prefix)), rev, 0)
	if err != nil {
		return nil, fmt.Errorf("acl: read records: %w", err)
	}
	st := &State{revision: rev, tokens: map[SecretHash]*Token{}, policies: map[string]api.ACLPolicy{},
		users: map[string]UserRecord{}}
	var toks []*Token
	for _, kv := range kvs {
		key := string(kv.Key)
		switch {
		case key == BootstrapKey:
			st.bootstrapped, st.bootRevision = true, kv.ModRevision
			_ = json.Unmarshal(kv.Value, &st.boot) // an undecodable record still bootstraps
		case strings.HasPrefix(key, UsersPrefix):
			var u UserRecord
			if json.Unmarshal(kv.Value, &u) == nil && u.Name == strings.TrimPrefix(key, UsersPrefix) {
				u.Revision = kv.ModRevision
				st.users[u.Name] = u
			}
		case strings.HasPrefix(key, PoliciesPrefix):
			var p api.ACLPolicy
			if json.Unmarshal(kv.Value, &p) == nil {
				p.Revision = kv.ModRevision
				st.policies[p.Name] = p
			}
		case strings.HasPrefix(key, TokensPrefix):
			if t := decodeToken(strings.TrimPrefix(key, TokensPrefix), kv.Value); t != nil {
				toks = append(toks, t)
			}
		}
	}
	for _, t := range toks {
		t.authz = st.authorizerFor(t.rec)
		t.authz.hash = t.hash
		t.authz.guard = guard
		st.tokens[t.hash] = t
	}
	return st, nil
}

// decodeToken decodes a token record stored under the hash hexHash; nil when any
// part of it does not decode.
func decodeToken(hexHash string, value []byte) *Token {
	h, err := ParseSecretHash(hexHash)
	var rec TokenRecord
	if err != nil || json.Unmarshal(value, &rec) != nil {
		return nil
	}
	t := &Token{hash: h, rec: rec}
	if rec.ExpirationTime != "" {
		if t.expires, err = time.Parse(time.RFC3339, rec.ExpirationTime); err != nil {
			return nil
		}
	}
	return t
}

// authorizerFor merges the rules of the token's policies; a policy that does not
// exist (deleted) grants nothing.
func (st *State) authorizerFor(rec TokenRecord) *Authorizer {
	policies := st.PoliciesNamed(rec.Policies)
	if rec.User != "" {
		policies = st.RolePolicies(st.users[rec.User].Roles)
	}
	a := NewAuthorizer(policies...)
	a.accessor, a.user = rec.AccessorID, rec.User
	return a
}

// Bootstrapped reports whether the bootstrap record exists: from then on, ACLs are
// enforced.
func (st *State) Bootstrapped() bool { return st.bootstrapped }

// Enforced reports whether ACLs are enforced: bootstrapped, and not paused by etcd's
// auth disable.
func (st *State) Enforced() bool { return st.bootstrapped && !st.boot.Disabled }

// Bootstrap returns the bootstrap record and its mod revision (0 when there is none).
func (st *State) Bootstrap() (BootstrapRecord, int64) { return st.boot, st.bootRevision }

// Revision is the store revision the records were read at.
func (st *State) Revision() int64 { return st.revision }

// Lookup finds the token whose secret hashes to h, nil when there is none. The map is
// keyed by the secret's hash; the final comparison of the hashes is constant-time.
func (st *State) Lookup(h SecretHash) *Token {
	t, ok := st.tokens[h]
	if !ok || subtle.ConstantTimeCompare(t.hash[:], h[:]) != 1 {
		return nil
	}
	return t
}

// Tokens yields every token of the state, in no particular order.
func (st *State) Tokens() iter.Seq2[SecretHash, *Token] {
	return func(yield func(SecretHash, *Token) bool) {
		for h, t := range st.tokens {
			if !yield(h, t) {
				return
			}
		}
	}
}

// Policy returns the stored policy name (its Revision set to the record's
// ModRevision).
func (st *State) Policy(name string) (api.ACLPolicy, bool) {
	p, ok := st.policies[name]
	return p, ok
}

// Policies yields every stored policy, in no particular order.
func (st *State) Policies() iter.Seq[api.ACLPolicy] {
	return func(yield func(api.ACLPolicy) bool) {
		for _, p := range st.policies {
			if !yield(p) {
				return
			}
		}
	}
}

// PoliciesNamed returns the stored policies of names, in their order (a missing one
// grants nothing and is left out).
func (st *State) PoliciesNamed(names []string) []api.ACLPolicy {
	out := make([]api.ACLPolicy, 0, len(names))
	for _, n := range names {
		if p, ok := st.policies[n]; ok {
			out = append(out, p)
		}
	}
	return out
}

// Current returns the rights az's token holds in st at now: a long-lived connection
// (the stream protocol) authenticates once but is checked against every policy
// change. A token deleted since, or expired, is ErrUnauthorized. A nil az (ACLs not
// enforced) stays nil.
func (st *State) Current(az *Authorizer, now time.Time) (*Authorizer, error) {
	if az == nil {
		return nil, nil
	}
	t := st.Lookup(az.hash)
	if t == nil {
		return nil, fmt.Errorf("%w: %v", ErrUnauthorized, ErrUnknownToken)
	}
	if t.Expired(now) {
		return nil, t.ExpiredError()
	}
	return t.authz, nil
}
