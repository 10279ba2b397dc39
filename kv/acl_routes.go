package kv

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// ruleKind says how a route is authorized.
type ruleKind uint8

const (
	// ruleOpen: served without a token (health, status, the bootstrap route, and the
	// method-less fallbacks that only answer 405).
	ruleOpen ruleKind = iota + 1
	// ruleToken: any valid token.
	ruleToken
	// ruleOperator: the operator right routeRule.right.
	ruleOperator
	// ruleKeys: a valid token; the core checks each key it reads or writes.
	ruleKeys
	// ruleObjects: a valid token; the core checks the read or write right on the
	// typed resource the request reads or writes (core_resources.go), for every door.
	ruleObjects
	// ruleAnyWrite: a token that may write some key (leases).
	ruleAnyWrite
)

type routeRule struct {
	kind  ruleKind
	right string // ruleOperator
}

func op(right string) routeRule { return routeRule{kind: ruleOperator, right: right} }

// routeRules is the access rule of every route pattern, the agent's included. A
// pattern registered without a rule is answered 403 (fail closed), and
// TestACLRouteTable fails.
var routeRules = map[string]routeRule{
	"GET " + api.PathHealth:        {kind: ruleOpen},
	"GET " + api.PathReady:         {kind: ruleOpen},
	"GET " + api.PathLive:          {kind: ruleOpen},
	"GET " + api.PathStatus:        {kind: ruleOpen},
	"POST " + api.PathACLBootstrap: {kind: ruleOpen},

	"GET " + api.PathKV + "{key...}":    {kind: ruleKeys},
	"PUT " + api.PathKV + "{key...}":    {kind: ruleKeys},
	"DELETE " + api.PathKV + "{key...}": {kind: ruleKeys},
	"GET " + api.PathWatch + "{key...}": {kind: ruleKeys},
	"GET " + api.PathStream:             {kind: ruleKeys},
	"POST " + api.PathTxn:               {kind: ruleKeys},
	"POST " + api.PathCompact:           op(api.RightCompact),

	"POST " + api.PathLeases:                     {kind: ruleAnyWrite},
	"GET " + api.PathLeases:                      {kind: ruleAnyWrite},
	"GET " + api.PathLeases + "/{id}":            {kind: ruleAnyWrite},
	"DELETE " + api.PathLeases + "/{id}":         {kind: ruleAnyWrite},
	"POST " + api.PathLeases + "/{id}/keepalive": {kind: ruleAnyWrite},

	"GET " + PathAPIs: {kind: ruleToken},
	"GET " + PathAPIs + "/{group}/{version}/{resource}":           {kind: ruleObjects},
	"GET " + PathAPIs + "/{group}/{version}/{resource}/{name}":    {kind: ruleObjects},
	"PUT " + PathAPIs + "/{group}/{version}/{resource}/{name}":    {kind: ruleObjects},
	"DELETE " + PathAPIs + "/{group}/{version}/{resource}/{name}": {kind: ruleObjects},

	"GET " + api.PathMetrics:                               {kind: ruleToken},
	"GET " + api.PathVersions:                              op(api.RightMembers),
	"GET " + api.PathAgentMembers:                          op(api.RightMembers),
	"POST " + api.PathAgentLeave:                           op(api.RightPeers),
	"DELETE " + api.PathAgentPeers + "{id}":                op(api.RightPeers),
	"POST " + api.PathAgentTransferLeader:                  op(api.RightLeadership),
	"GET " + api.PathAgentSnapshot:                         op(api.RightSnapshot),
	"POST " + api.PathAgentSnapshot:                        op(api.RightAll), // restore: management only
	"PUT " + api.PathAgentSchema:                           op(api.RightSchema),
	"GET " + api.PathMigrations:                            op(api.RightMigrations),
	"POST " + api.PathMigrations:                           op(api.RightMigrations),
	"DELETE " + api.PathMigrations + "/{group}/{resource}": op(api.RightMigrations),
	"GET " + api.PathMigrationSettings:                     op(api.RightMigrations),
	"PUT " + api.PathMigrationSettings:                     op(api.RightMigrations),
	"GET " + api.PathKeyMigrations:                         op(api.RightKeyMigrations),
	"GET " + api.PathKeyMigrations + "/{name}":             op(api.RightKeyMigrations),
	"POST " + api.PathKeyMigrations + "/{name}/advance":    op(api.RightKeyMigrations),
	"POST " + api.PathKeyMigrations + "/{name}/rollback":   op(api.RightKeyMigrations),
	"GET " + api.PathACLTokens:                             op(api.RightACL),
	"POST " + api.PathACLTokens:                            op(api.RightACL),
	"DELETE " + api.PathACLTokens + "/{accessor}":          op(api.RightACL),
	"GET " + api.PathACLTokenSelf:                          {kind: ruleToken},
	"GET " + api.PathACLPolicies:                           op(api.RightACL),
	"GET " + api.PathACLPolicies + "/{name}":               op(api.RightACL),
	"PUT " + api.PathACLPolicies + "/{name}":               op(api.RightACL),
	"DELETE " + api.PathACLPolicies + "/{name}":            op(api.RightACL),
}

// register adds h under pattern to the mux behind the pattern's access rule, and
// records the pattern (Routes). open marks a method-less 405 fallback of route.
func (s *Server) register(pattern string, h http.Handler, open bool) {
	rule, ok := routeRules[pattern]
	if open {
		rule, ok = routeRule{kind: ruleOpen}, true
	}
	s.routesMu.Lock()
	s.patterns = append(s.patterns, pattern)
	s.routesMu.Unlock()
	s.mux.Handle(pattern, s.authorize(pattern, rule, ok, h))
}

// Routes returns every registered route pattern (for the route × token table test and
// docs), in registration order.
func (s *Server) Routes() []string {
	s.routesMu.Lock()
	defer s.routesMu.Unlock()
	return slices.Clone(s.patterns)
}

// RouteHasRule reports whether pattern has an access rule.
func RouteHasRule(pattern string) bool { _, ok := routeRules[pattern]; return ok }

type authzKey struct{}

// authzOf returns the request's authorizer: nil when ACLs are not enforced.
func authzOf(ctx context.Context) *acl.Authorizer {
	a, _ := ctx.Value(authzKey{}).(*acl.Authorizer)
	return a
}

// authorize is the one place requests are authenticated: it checks the route's rule
// and hands the token's authorizer to the handler in the request context.
func (s *Server) authorize(pattern string, rule routeRule, ok bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok {
			s.log.Error("acl: route without an access rule: refusing it", "pattern", pattern)
			s.writeError(w, r, fmt.Errorf("%w: route %q has no access rule", ErrForbidden, pattern))
			return
		}
		if rule.kind == ruleOpen {
			h.ServeHTTP(w, r)
			return
		}
		az, err := s.authenticate(r.Context(), r.Header.Get(api.HeaderAuthorization))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if az == nil {
			h.ServeHTTP(w, r) // not enforced
			return
		}
		if err := checkRule(rule, az, r); err != nil {
			s.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authzKey{}, az)))
	})
}

func checkRule(rule routeRule, az *acl.Authorizer, r *http.Request) error {
	switch rule.kind {
	case ruleOperator:
		if !az.Right(rule.right) {
			return acl.ForbiddenRight(rule.right)
		}
	case ruleAnyWrite:
		if !az.AnyWrite() {
			return fmt.Errorf("%w: leases need a token with a write right on some key prefix", ErrForbidden)
		}
	}
	return nil
}

// minLinearizableRefresh bounds how often an unknown token makes the node re-read the
// ACL records at the leader (a token created a moment ago may not be applied here).
const minLinearizableRefresh = 100 * time.Millisecond

// authenticate resolves the Authorization header: (nil, nil) when ACLs are not
// enforced, the token's authorizer, or ErrUnauthorized. Errors never hold the token.
func (s *Server) authenticate(ctx context.Context, header string) (*acl.Authorizer, error) {
	st, err := s.aclStateConfirmed(ctx)
	if err != nil {
		return nil, err
	}
	if !st.Bootstrapped() {
		return nil, s.notBootstrapped()
	}
	secret, err := acl.ParseBearer(header)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	return s.tokenAuthz(ctx, st, acl.HashSecret(secret))
}

// aclStateConfirmed returns the node's ACL state, read at the leader at least once.
func (s *Server) aclStateConfirmed(ctx context.Context) (*acl.State, error) {
	st, err := s.aclStateNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("acl state: %w", err)
	}
	if !s.aclConfirmed.Load() {
		// A node that has just started (or joined) may not have applied the ACL records
		// yet: its empty state would say "not bootstrapped" and let everything through
		// (allow) or refuse everything (deny). Until one read at the leader has shown it
		// the records, it asks the leader; the watch keeps it current afterwards.
		if st, err = s.reloadACL(ctx, fsm.Linearizable); err != nil {
			return nil, fmt.Errorf("acl state: %w", err)
		}
		s.aclConfirmed.Store(true)
	}
	return st, nil
}

// notBootstrapped is what a request gets before the ACL system is bootstrapped: nil
// (not enforced) under -acl-default allow, ErrUnauthorized under deny.
func (s *Server) notBootstrapped() error {
	if s.cfg.ACLDefault == ACLDeny {
		return fmt.Errorf("%w: ACLs are on (-acl-default deny) and the cluster's ACL system is not "+
			"bootstrapped yet: run `keel acl bootstrap`", ErrUnauthorized)
	}
	return nil
}

// tokenAuthz returns the authorizer of the token whose secret hashes to h in st, or
// ErrUnauthorized. An unknown token makes the node re-read the records at the leader
// (at most every minLinearizableRefresh): it may have been created a moment ago.
func (s *Server) tokenAuthz(ctx context.Context, st *acl.State, h acl.SecretHash) (*acl.Authorizer, error) {
	t := st.Lookup(h)
	if t == nil {
		now := time.Now().UnixNano()
		if last := s.aclRefresh.Load(); now-last > int64(minLinearizableRefresh) && s.aclRefresh.CompareAndSwap(last, now) {
			if st2, err := s.reloadACL(ctx, fsm.Linearizable); err == nil {
				t = st2.Lookup(h)
			}
		}
	}
	if t == nil {
		return nil, fmt.Errorf("%w: %v", ErrUnauthorized, acl.ErrUnknownToken)
	}
	if t.Expired(time.Now()) {
		return nil, t.ExpiredError()
	}
	return t.Authorizer(), nil
}

// checkKey refuses the request unless its token may read (write) key.
func checkKey(ctx context.Context, key []byte, write bool) error {
	if az := authzOf(ctx); az != nil && !az.Key(key, write) {
		return acl.ForbiddenKey(key, write)
	}
	return nil
}

// readFilter returns nil when the token may read every key of [start, end), a
// per-key filter when it may read some of them, and ErrForbidden when none.
func readFilter(ctx context.Context, start, end []byte) (func(key []byte) bool, error) {
	az := authzOf(ctx)
	if az == nil || az.Span(start, end, false) {
		return nil, nil
	}
	if !az.Some(start, end) {
		return nil, acl.ForbiddenRange(start, end, false)
	}
	return func(key []byte) bool { return az.Key(key, false) }, nil
}

// listRights returns the token whose key rights filter a list of [start, end): nil
// when it may read every key of it (or ACLs are not enforced), ErrForbidden when it
// may read none.
func listRights(ctx context.Context, start, end []byte) (*acl.Authorizer, error) {
	az := authzOf(ctx)
	if az == nil || az.Span(start, end, false) {
		return nil, nil
	}
	if !az.Some(start, end) {
		return nil, acl.ForbiddenRange(start, end, false)
	}
	return az, nil
}

// checkTxnAccess refuses a KV API transaction unless az (nil: ACLs not enforced) may
// read every key (or range) it compares or gets and write every key it puts or
// deletes, in both branches, nested transactions (OpTxn) included. A put's lease needs no right of its own: rights on a lease follow its keys
// (routes_lease.go).
func checkTxnAccess(az *acl.Authorizer, txn *fsm.Txn) error {
	if az == nil || txn == nil {
		return nil
	}
	for _, c := range txn.Compares {
		if c.End != nil {
			if !az.Span(c.Key, c.End, false) {
				return acl.ForbiddenRange(c.Key, c.End, false)
			}
		} else if !az.Key(c.Key, false) {
			return acl.ForbiddenKey(c.Key, false)
		}
	}
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, o := range ops {
			if err := opAccess(az, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// opAccess refuses op of a transaction unless az may read (write) what it touches.
func opAccess(az *acl.Authorizer, o fsm.Op) error {
	switch {
	case o.Type == fsm.OpTxn:
		return checkTxnAccess(az, o.Txn) // both branches: either may run
	case o.Type == fsm.OpDeleteRange:
		if !az.Span(o.Key, o.End, true) {
			return acl.ForbiddenRange(o.Key, o.End, true)
		}
	case o.Type == fsm.OpGet && o.End != nil:
		if !az.Span(o.Key, o.End, false) {
			return acl.ForbiddenRange(o.Key, o.End, false)
		}
	default:
		if write := o.Type != fsm.OpGet; !az.Key(o.Key, write) {
			return acl.ForbiddenKey(o.Key, write)
		}
	}
	return nil
}
