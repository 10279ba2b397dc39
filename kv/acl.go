package kv

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// Access control. The ACL system of a cluster is a set of records under aclPrefix,
// written through Raft like any key (CmdTxn; no command format of its own):
//
//	\x00keel/acl/bootstrap            {"accessor_id":..., "time":...}   created once (CAS on version 0)
//	\x00keel/acl/policies/NAME        api.ACLPolicy as JSON
//	\x00keel/acl/tokens/SHA256HEX     tokenRecord as JSON (the secret's hash names the key)
//
// Every node keeps an aclState built from these records (aclLoop rebuilds it when the
// watch hub reports a change under the prefix), so checking a request costs one
// SHA-256 and a map lookup. Enforcement starts when the bootstrap record exists; before
// that, Config.ACLDefault decides: "allow" serves everything (as a release without
// ACLs did), "deny" answers only the open routes (health, status, bootstrap).
const (
	aclPrefix         = versions.SystemPrefix + "acl/"
	aclBootstrapKey   = aclPrefix + "bootstrap"
	aclPoliciesPrefix = aclPrefix + "policies/"
	aclTokensPrefix   = aclPrefix + "tokens/"
)

// ACL defaults (Config.ACLDefault).
const (
	ACLAllow = "allow"
	ACLDeny  = "deny"
)

// tokenRecord is the stored form of a token: never its secret.
type tokenRecord struct {
	AccessorID  string   `json:"accessor_id"`
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies"`
	CreateTime  string   `json:"create_time"`
	// ExpirationTime (RFC 3339), when set, is when the token stops working.
	ExpirationTime string `json:"expiration_time,omitempty"`
}

type bootstrapRecord struct {
	AccessorID string `json:"accessor_id"`
	Time       string `json:"time"`
}

// aclState is one immutable snapshot of the ACL records. Readers take it from
// Server.acl with an atomic load and never modify it.
type aclState struct {
	bootstrapped bool
	revision     int64 // store revision it was read at
	tokens       map[secretHash]*aclToken
	policies     map[string]api.ACLPolicy
	policyRevs   map[string]int64
}

// aclToken is a token of the state with its rights resolved.
type aclToken struct {
	hash    secretHash
	rec     tokenRecord
	authz   *authorizer
	expires time.Time // zero: never
}

// expired reports whether the token has expired at now.
func (t *aclToken) expired(now time.Time) bool { return !t.expires.IsZero() && !now.Before(t.expires) }

// errTokenExpired is the 401 of an expired token (it names when, never the secret).
func errTokenExpired(t *aclToken) error {
	return fmt.Errorf("%w: the token expired at %s", ErrUnauthorized, t.rec.ExpirationTime)
}

// loadACLState reads the ACL records of view at its latest revision. A record that
// does not decode is skipped (and cannot grant anything).
// Every authorizer it makes checks raw reads of typed resources against guard (nil:
// no resources).
func loadACLState(view *fsm.View, guard resourceGuard) (*aclState, error) {
	rev := view.Revision()
	kvs, _, err := view.Range([]byte(aclPrefix), fsm.PrefixEnd([]byte(aclPrefix)), rev, 0)
	if err != nil {
		return nil, fmt.Errorf("acl: read records: %w", err)
	}
	st := &aclState{revision: rev, tokens: map[secretHash]*aclToken{}, policies: map[string]api.ACLPolicy{},
		policyRevs: map[string]int64{}}
	var toks []*aclToken
	for _, kv := range kvs {
		key := string(kv.Key)
		switch {
		case key == aclBootstrapKey:
			st.bootstrapped = true
		case strings.HasPrefix(key, aclPoliciesPrefix):
			var p api.ACLPolicy
			if json.Unmarshal(kv.Value, &p) == nil {
				p.Revision = kv.ModRevision
				st.policies[p.Name] = p
				st.policyRevs[p.Name] = kv.ModRevision
			}
		case strings.HasPrefix(key, aclTokensPrefix):
			h, err := parseSecretHash(strings.TrimPrefix(key, aclTokensPrefix))
			var rec tokenRecord
			if err == nil && json.Unmarshal(kv.Value, &rec) == nil {
				t := &aclToken{hash: h, rec: rec}
				if rec.ExpirationTime != "" {
					if t.expires, err = time.Parse(time.RFC3339, rec.ExpirationTime); err != nil {
						continue // an expiry that does not parse: the token grants nothing
					}
				}
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

// authorizerFor merges the rules of the token's policies; a policy that does not
// exist (deleted) grants nothing.
func (st *aclState) authorizerFor(rec tokenRecord) *authorizer {
	a := &authorizer{accessor: rec.AccessorID, operator: map[string]bool{}}
	for _, name := range rec.Policies {
		p, ok := st.policies[name]
		if !ok {
			continue
		}
		a.keys = append(a.keys, p.Keys...)
		a.resources = append(a.resources, p.Resources...)
		for _, r := range p.Operator {
			a.operator[r] = true
		}
	}
	return a
}

// lookupHash finds the token whose secret hashes to h. The map is keyed by the
// secret's hash; the final comparison of the hashes is constant-time.
func (st *aclState) lookupHash(h secretHash) *aclToken {
	t, ok := st.tokens[h]
	if !ok || subtle.ConstantTimeCompare(t.hash[:], h[:]) != 1 {
		return nil
	}
	return t
}

// authorizer answers what one token may do. A nil *authorizer allows everything (ACLs
// not enforced); every method is safe on nil.
type authorizer struct {
	accessor  string
	hash      secretHash // of the token's secret: finds the token's current rights (current)
	keys      []api.ACLKeyRule
	resources []api.ACLResourceRule
	operator  map[string]bool
	guard     resourceGuard // typed resources' key ranges (acl_resources.go); nil: none
}

func grants(access string, write bool) bool {
	return access == api.AccessWrite || (!write && access == api.AccessRead)
}

func accessWord(write bool) string {
	if write {
		return api.AccessWrite
	}
	return api.AccessRead
}

// right reports whether the token holds operator right r.
func (a *authorizer) right(r string) bool {
	return a == nil || a.operator[api.RightAll] || a.operator[r]
}

// key reports whether the token may read (or write) key. The ACL records themselves
// need the acl right whatever the key rules say.
func (a *authorizer) key(key []byte, write bool) bool {
	if a == nil {
		return true
	}
	if bytes.HasPrefix(key, []byte(aclPrefix)) && !a.right(api.RightACL) {
		return false
	}
	if a.guardedKey(key, write) {
		return false
	}
	for _, r := range a.keys {
		if grants(r.Access, write) && bytes.HasPrefix(key, []byte(r.Prefix)) {
			return true
		}
	}
	return false
}

// span reports whether the token may read (or write) every key of [start, end)
// (end empty = to the end of the keyspace): one rule must cover the whole range.
func (a *authorizer) span(start, end []byte, write bool) bool {
	if a == nil {
		return true
	}
	if overlaps(start, end, []byte(aclPrefix)) && !a.right(api.RightACL) {
		return false
	}
	if a.guardedSpan(start, end, write) {
		return false
	}
	for _, r := range a.keys {
		if !grants(r.Access, write) || !bytes.HasPrefix(start, []byte(r.Prefix)) {
			continue
		}
		re := fsm.PrefixEnd([]byte(r.Prefix))
		if re == nil || (len(end) > 0 && bytes.Compare(end, re) <= 0) {
			return true
		}
	}
	return false
}

// some reports whether the token may read at least one key of [start, end): a list
// or watch of the range is then served, filtered by key.
func (a *authorizer) some(start, end []byte) bool {
	if a == nil {
		return true
	}
	for _, r := range a.keys {
		if overlaps(start, end, []byte(r.Prefix)) {
			return true
		}
	}
	return false
}

// nextReadable returns the smallest key >= key and < end (end empty = no end) the
// token may read by its rules, or nil when there is none. It is computed from the
// rules alone, never from the data: a scan that resumes there names no key the token
// cannot read.
//
//	rules: read "b/", read "d/"; no acl right
//	nextReadable("a")   = "b/"      (the next rule's prefix)
//	nextReadable("b/x") = "b/x"     (readable itself)
//	nextReadable("c")   = "d/"
//	nextReadable("e")   = nil
func (a *authorizer) nextReadable(key, end []byte) []byte {
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
		if a.key(key, false) {
			return key
		}
		var next []byte
		if bytes.HasPrefix(key, []byte(aclPrefix)) && !a.right(api.RightACL) {
			next = fsm.PrefixEnd([]byte(aclPrefix))
		} else if past := a.pastGuarded(key); past != nil {
			if len(past) == 0 {
				return nil
			}
			key = past
			continue
		}
		for _, r := range a.keys {
			p := []byte(r.Prefix)
			if grants(r.Access, false) && bytes.Compare(p, key) > 0 && (next == nil || bytes.Compare(p, next) < 0) {
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

// overlaps reports whether [start, end) (end empty = no end) meets the keys with
// prefix p.
func overlaps(start, end, p []byte) bool {
	pe := fsm.PrefixEnd(p)
	return (pe == nil || bytes.Compare(start, pe) < 0) && (len(end) == 0 || bytes.Compare(end, p) > 0)
}

// resource reports whether the token may read (or write) objects of group/resource.
func (a *authorizer) resource(group, resource string, write bool) bool {
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

// anyWrite reports whether the token may write some key (leases are for writers).
func (a *authorizer) anyWrite() bool {
	if a == nil {
		return true
	}
	for _, r := range a.keys {
		if r.Access == api.AccessWrite {
			return true
		}
	}
	return false
}

// Errors naming the missing right; never the data.
func forbiddenKey(key []byte, write bool) error {
	return fmt.Errorf("%w: the token has no %s right on key %q", ErrForbidden, accessWord(write), key)
}

func forbiddenRange(start, end []byte, write bool) error {
	return fmt.Errorf("%w: the token has no %s right on every key of [%q, %q)", ErrForbidden, accessWord(write), start, end)
}

func forbiddenRight(right string) error {
	return fmt.Errorf("%w: the token lacks the operator right %q", ErrForbidden, right)
}

var policyNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validatePolicy checks a policy before it is stored.
func validatePolicy(p api.ACLPolicy) error {
	if !policyNamePattern.MatchString(p.Name) {
		return fmt.Errorf("%w: policy name %q: want 1-128 of [A-Za-z0-9._-], starting with a letter or digit", ErrInvalidBody, p.Name)
	}
	for i, k := range p.Keys {
		if k.Access != api.AccessRead && k.Access != api.AccessWrite {
			return fmt.Errorf("%w: keys[%d].access %q: want %q or %q", ErrInvalidBody, i, k.Access, api.AccessRead, api.AccessWrite)
		}
	}
	for i, r := range p.Resources {
		if r.Access != api.AccessRead && r.Access != api.AccessWrite {
			return fmt.Errorf("%w: resources[%d].access %q: want %q or %q", ErrInvalidBody, i, r.Access, api.AccessRead, api.AccessWrite)
		}
		if r.Group == "" || r.Resource == "" {
			return fmt.Errorf("%w: resources[%d]: group and resource are required (\"*\" matches any)", ErrInvalidBody, i)
		}
	}
	for _, o := range p.Operator {
		if o != api.RightAll && !slices.Contains(api.OperatorRights, o) {
			return fmt.Errorf("%w: operator right %q: want one of %v or %q", ErrInvalidBody, o, api.OperatorRights, api.RightAll)
		}
	}
	return nil
}

// managementPolicy grants everything.
func managementPolicy() api.ACLPolicy {
	return api.ACLPolicy{Name: api.ManagementPolicy, Description: "every right (created by bootstrap)",
		Keys:      []api.ACLKeyRule{{Prefix: "", Access: api.AccessWrite}},
		Resources: []api.ACLResourceRule{{Group: "*", Resource: "*", Access: api.AccessWrite}},
		Operator:  []string{api.RightAll}}
}

// current returns the rights az's token holds now: a long-lived connection (the stream
// protocol) authenticates once but is checked against every policy change. A token
// deleted since is ErrUnauthorized.
func (s *Server) current(az *authorizer) (*authorizer, error) {
	st := s.acl.Load()
	if az == nil || st == nil {
		return az, nil
	}
	t, ok := st.tokens[az.hash]
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrUnauthorized, errUnknownToken)
	}
	if t.expired(time.Now()) {
		return nil, errTokenExpired(t)
	}
	return t.authz, nil
}

// aclStateNow returns the node's ACL state, reading it from the store the first time.
func (s *Server) aclStateNow(ctx context.Context) (*aclState, error) {
	if st := s.acl.Load(); st != nil {
		return st, nil
	}
	return s.reloadACL(ctx, fsm.Serializable)
}

// reloadACL rebuilds the ACL state from a view of the store and publishes it (unless a
// newer one was published meanwhile).
func (s *Server) reloadACL(ctx context.Context, c fsm.Consistency) (*aclState, error) {
	view, err := s.store.View(ctx, c)
	if err != nil {
		return nil, err
	}
	st, err := loadACLState(view, s.resourceGuard)
	if err != nil {
		return nil, err
	}
	for {
		old := s.acl.Load()
		if old != nil && old.revision >= st.revision {
			return old, nil
		}
		if s.acl.CompareAndSwap(old, st) {
			return st, nil
		}
	}
}

// aclLoop keeps Server.acl current: it rebuilds the state, then waits for the watch
// hub to report a change under aclPrefix (or a restore), until stop is closed.
func (s *Server) aclLoop(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	for ctx.Err() == nil {
		st, err := s.reloadACL(ctx, fsm.Serializable)
		if err == nil {
			var w *fsm.Watcher
			w, err = s.store.Watch(fsm.WatchOptions{Key: []byte(aclPrefix), End: fsm.PrefixEnd([]byte(aclPrefix)),
				StartRevision: st.revision + 1})
			if err == nil {
				_, err = w.Next(ctx)
				w.Close()
			}
			if errors.Is(err, fsm.ErrWatchRestored) {
				s.acl.Store(nil) // the restored state may be older: rebuild from scratch
				err = nil
			}
		}
		if err != nil && ctx.Err() == nil {
			s.log.Debug("acl: state refresh", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
