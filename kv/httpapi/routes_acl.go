package httpapi

import (
	"net/http"

	"github.com/keel-kv/keel/kv/api"
)

// ACL routes: bootstrap, tokens and policies (the core's ACL methods, kv/core_acl.go).

func (s *Server) aclRoutes() {
	s.route(api.PathACLBootstrap, map[string]handlerFunc{http.MethodPost: s.handleACLBootstrap})
	s.route(api.PathACLTokens, map[string]handlerFunc{
		http.MethodGet:  s.handleACLTokenList,
		http.MethodPost: s.handleACLTokenCreate,
	})
	s.route(api.PathACLTokens+"/{accessor}", map[string]handlerFunc{http.MethodDelete: s.handleACLTokenDelete})
	s.route(api.PathACLTokenSelf, map[string]handlerFunc{http.MethodGet: s.handleACLTokenSelf})
	s.route(api.PathACLPolicies, map[string]handlerFunc{http.MethodGet: s.handleACLPolicyList})
	s.route(api.PathACLPolicies+"/{name}", map[string]handlerFunc{
		http.MethodGet:    s.handleACLPolicyGet,
		http.MethodPut:    s.handleACLPolicyPut,
		http.MethodDelete: s.handleACLPolicyDelete,
	})
}

// handleACLBootstrap serves POST /v1/acl/bootstrap: the management token, once per
// cluster (409 afterwards).
func (s *Server) handleACLBootstrap(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	out, err := s.core.ACLBootstrap(ctx)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleACLTokenCreate(w http.ResponseWriter, r *http.Request) error {
	var req api.ACLTokenRequest
	if err := decodeJSONBody(w, r, 64<<10, "token request", "acl token", &req); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	out, err := s.core.ACLTokenCreate(ctx, callerOf(r), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleACLTokenList(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	resp, err := s.core.ACLTokens(ctx, callerOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) handleACLTokenSelf(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	t, err := s.core.ACLTokenSelf(r.Context(), callerOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *Server) handleACLTokenDelete(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	acc := r.PathValue("accessor")
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.core.ACLTokenDelete(ctx, callerOf(r), acc); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": acc})
	return nil
}

func (s *Server) handleACLPolicyList(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	resp, err := s.core.ACLPolicies(ctx, callerOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) handleACLPolicyGet(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	p, err := s.core.ACLPolicy(ctx, callerOf(r), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// handleACLPolicyPut creates or replaces a policy; a Revision in the body makes it a
// compare-and-swap on the stored one.
func (s *Server) handleACLPolicyPut(w http.ResponseWriter, r *http.Request) error {
	var p api.ACLPolicy
	if err := decodeJSONBody(w, r, 256<<10, "policy", "acl policy", &p); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	p, err := s.core.ACLPolicyPut(ctx, callerOf(r), r.PathValue("name"), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *Server) handleACLPolicyDelete(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.core.ACLPolicyDelete(ctx, callerOf(r), name); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
	return nil
}
