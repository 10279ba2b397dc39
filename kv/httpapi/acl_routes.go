package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/keel-kv/keel/kv"
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
	// ruleCore: a valid token; the core checks the right of what the request does
	// (each key it reads or writes, the operator right of a compaction, a write right
	// for leases, the ACL right of the ACL routes), as it does for every door.
	ruleCore
	// ruleObjects: a valid token; the core checks the read or write right on the
	// typed resource the request reads or writes (kv/core_resources.go).
	ruleObjects
)

type routeRule struct {
	kind  ruleKind
	right string // ruleOperator: a route the core does not serve (the agent's)
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

	"GET " + api.PathKV + "{key...}":    {kind: ruleCore},
	"PUT " + api.PathKV + "{key...}":    {kind: ruleCore},
	"DELETE " + api.PathKV + "{key...}": {kind: ruleCore},
	"GET " + api.PathWatch + "{key...}": {kind: ruleCore},
	"GET " + api.PathStream:             {kind: ruleCore},
	"POST " + api.PathTxn:               {kind: ruleCore},
	"POST " + api.PathCompact:           {kind: ruleCore},

	"POST " + api.PathLeases:                     {kind: ruleCore},
	"GET " + api.PathLeases:                      {kind: ruleCore},
	"GET " + api.PathLeases + "/{id}":            {kind: ruleCore},
	"DELETE " + api.PathLeases + "/{id}":         {kind: ruleCore},
	"POST " + api.PathLeases + "/{id}/keepalive": {kind: ruleCore},

	"GET " + PathAPIs: {kind: ruleToken},
	"GET " + PathAPIs + "/{group}/{version}/{resource}":           {kind: ruleObjects},
	"GET " + PathAPIs + "/{group}/{version}/{resource}/{name}":    {kind: ruleObjects},
	"PUT " + PathAPIs + "/{group}/{version}/{resource}/{name}":    {kind: ruleObjects},
	"DELETE " + PathAPIs + "/{group}/{version}/{resource}/{name}": {kind: ruleObjects},

	"GET " + api.PathMetrics:                               {kind: ruleToken},
	"GET " + api.PathVersions:                              op(api.RightMembers),
	"GET " + api.PathAgentMembers:                          op(api.RightMembers),
	"POST " + api.PathAgentLeave:                           op(api.RightPeers),
	"DELETE " + api.PathAgentPeers + "{id}":                {kind: ruleCore}, // kv.Server.RemoveMember
	"POST " + api.PathAgentTransferLeader:                  {kind: ruleCore}, // kv.Server.TransferLeadership
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
	"GET " + api.PathACLTokens:                             {kind: ruleCore},
	"POST " + api.PathACLTokens:                            {kind: ruleCore},
	"DELETE " + api.PathACLTokens + "/{accessor}":          {kind: ruleCore},
	"GET " + api.PathACLTokenSelf:                          {kind: ruleToken},
	"GET " + api.PathACLPolicies:                           {kind: ruleCore},
	"GET " + api.PathACLPolicies + "/{name}":               {kind: ruleCore},
	"PUT " + api.PathACLPolicies + "/{name}":               {kind: ruleCore},
	"DELETE " + api.PathACLPolicies + "/{name}":            {kind: ruleCore},
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

type callerKey struct{}

// CallerOf is the kv.Caller authorize resolved for r (the zero kv.Caller on an open
// route or when ACLs are not enforced): the door, and the agent's routes the core
// checks (ruleCore), call the core's methods for it.
func CallerOf(r *http.Request) kv.Caller {
	c, _ := r.Context().Value(callerKey{}).(kv.Caller)
	return c
}

// authorize is the one place requests are authenticated: it checks the route's rule
// and hands the caller to the handler in the request context.
func (s *Server) authorize(pattern string, rule routeRule, ok bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok {
			s.log.Error("acl: route without an access rule: refusing it", "pattern", pattern)
			s.writeError(w, r, fmt.Errorf("%w: route %q has no access rule", kv.ErrForbidden, pattern))
			return
		}
		if rule.kind == ruleOpen {
			h.ServeHTTP(w, r)
			return
		}
		c, err := s.core.AuthenticateHeader(r.Context(), r.Header.Get(api.HeaderAuthorization))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !c.Enforced() {
			h.ServeHTTP(w, r) // not enforced
			return
		}
		if rule.kind == ruleOperator {
			if err := s.core.CheckRight(c, rule.right); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}
