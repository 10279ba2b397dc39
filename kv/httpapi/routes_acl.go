package httpapi

import (
	"context"
	"net/http"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// ACL routes: bootstrap, tokens and policies (the core's ACL methods, kv/core_acl.go).
func (s *Server) aclRoutes() {
	acl := s.core.CheckACLManagement
	s.route(api.PathACLBootstrap, map[string]handlerFunc{http.MethodPost: s.call(nil,
		func(ctx context.Context, _ kv.Caller, _ *http.Request) (any, error) { return s.core.ACLBootstrap(ctx) })})
	s.route(api.PathACLTokens, map[string]handlerFunc{
		http.MethodGet: s.call(acl, func(ctx context.Context, c kv.Caller, _ *http.Request) (any, error) {
			return s.core.ACLTokens(ctx, c)
		}),
		http.MethodPost: callBody(s, acl, 64<<10, "acl token", func(ctx context.Context, c kv.Caller, _ *http.Request, req api.ACLTokenRequest) (any, error) {
			return s.core.ACLTokenCreate(ctx, c, req)
		}),
	})
	s.route(api.PathACLTokens+"/{accessor}", map[string]handlerFunc{http.MethodDelete: s.call(acl,
		func(ctx context.Context, c kv.Caller, r *http.Request) (any, error) {
			acc := r.PathValue("accessor")
			return map[string]string{"deleted": acc}, s.core.ACLTokenDelete(ctx, c, acc)
		})})
	s.route(api.PathACLTokenSelf, map[string]handlerFunc{http.MethodGet: s.call(nil, // any valid token
		func(ctx context.Context, c kv.Caller, _ *http.Request) (any, error) {
			return s.core.ACLTokenSelf(ctx, c)
		})})
	s.route(api.PathACLPolicies, map[string]handlerFunc{http.MethodGet: s.call(acl,
		func(ctx context.Context, c kv.Caller, _ *http.Request) (any, error) {
			return s.core.ACLPolicies(ctx, c)
		})})
	s.route(api.PathACLPolicies+"/{name}", map[string]handlerFunc{
		http.MethodGet: s.call(acl, func(ctx context.Context, c kv.Caller, r *http.Request) (any, error) {
			return s.core.ACLPolicy(ctx, c, r.PathValue("name"))
		}),
		// A Revision in the body makes the put a compare-and-swap on the stored policy.
		http.MethodPut: callBody(s, acl, 256<<10, "acl policy", func(ctx context.Context, c kv.Caller, r *http.Request, p api.ACLPolicy) (any, error) {
			return s.core.ACLPolicyPut(ctx, c, r.PathValue("name"), p)
		}),
		http.MethodDelete: s.call(acl, func(ctx context.Context, c kv.Caller, r *http.Request) (any, error) {
			name := r.PathValue("name")
			return map[string]string{"deleted": name}, s.core.ACLPolicyDelete(ctx, c, name)
		}),
	})
}
