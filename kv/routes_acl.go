package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// ACL routes: bootstrap, tokens and policies (see acl.go for the records they write).

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

// newToken mints a token for policies: its record (to store) and the api form with
// the secret (to show once).
func newToken(desc string, policies []string, ttl time.Duration) (acl.TokenRecord, acl.SecretHash, api.ACLToken, error) {
	secret, err := acl.NewSecret()
	if err != nil {
		return acl.TokenRecord{}, acl.SecretHash{}, api.ACLToken{}, fmt.Errorf("acl: token secret: %w", err)
	}
	acc, err := acl.NewAccessorID()
	if err != nil {
		return acl.TokenRecord{}, acl.SecretHash{}, api.ACLToken{}, fmt.Errorf("acl: accessor id: %w", err)
	}
	now := time.Now().UTC()
	rec := acl.TokenRecord{AccessorID: acc, Description: desc, Policies: policies, CreateTime: now.Format(time.RFC3339)}
	if ttl > 0 {
		rec.ExpirationTime = now.Add(ttl).Format(time.RFC3339)
	}
	out := api.ACLToken{AccessorID: acc, SecretID: secret, Description: desc, Policies: policies, CreateTime: rec.CreateTime,
		ExpirationTime: rec.ExpirationTime}
	return rec, acl.HashSecret(secret), out, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs of strings are marshalled here
	}
	return b
}

// applyACL replicates an ACL transaction and refreshes this node's ACL state, so the
// node that answered sees the change at once. It reports whether the guards held.
func (s *Server) applyACL(ctx context.Context, txn *fsm.Txn) (bool, error) {
	res, err := s.apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
	if err != nil {
		return false, err
	}
	if _, err := s.reloadACL(ctx, fsm.Linearizable); err != nil {
		s.log.Warn("acl: refresh after write", "error", err)
	}
	return res.Succeeded, nil
}

// handleACLBootstrap serves POST /v1/acl/bootstrap: once per cluster it creates the
// management policy and a token bound to it, and answers the token with its secret.
// The bootstrap record is created with a compare on version 0, so of two concurrent
// bootstraps exactly one succeeds; later ones are 409.
func (s *Server) handleACLBootstrap(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	if err := s.bootstrapOpen(r.Context()); err != nil {
		return err
	}
	rec, hash, out, err := newToken("bootstrap management token", []string{api.ManagementPolicy}, 0)
	if err != nil {
		return err
	}
	boot := acl.BootstrapRecord{AccessorID: rec.AccessorID, Time: rec.CreateTime}
	txn := &fsm.Txn{
		Compares: []fsm.Compare{{Key: []byte(acl.BootstrapKey), Target: fsm.TargetVersion, Result: fsm.CompareEqual, Int: 0}},
		Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte(acl.BootstrapKey), Value: mustJSON(boot)},
			{Type: fsm.OpPut, Key: []byte(acl.PoliciesPrefix + api.ManagementPolicy), Value: mustJSON(acl.ManagementPolicy())},
			{Type: fsm.OpPut, Key: []byte(acl.TokensPrefix + hash.String()), Value: mustJSON(rec)},
		},
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	ok, err := s.applyACL(ctx, txn)
	if err != nil {
		return fmt.Errorf("acl bootstrap: %w", err)
	}
	if !ok {
		return errBootstrapped()
	}
	s.log.Info("acl: bootstrapped", "accessor_id", rec.AccessorID)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// bootstrapOpen refuses a bootstrap, before anything is proposed, when this node's ACL
// state already shows the cluster bootstrapped: the route needs no token, so each
// refused request must cost no Raft entry. A node that has not applied the bootstrap
// yet lets the request through, and the Raft guard (a compare on version 0) decides.
func (s *Server) bootstrapOpen(ctx context.Context) error {
	st, err := s.aclStateNow(ctx)
	if err != nil {
		return fmt.Errorf("acl bootstrap: %w", err)
	}
	if st.Bootstrapped() {
		return errBootstrapped()
	}
	return nil
}

func errBootstrapped() error {
	return fmt.Errorf("%w: the management token was shown by the first bootstrap and is not stored in clear; "+
		"use it (or another token with the acl right) to create tokens", ErrAlreadyBootstrapped)
}

func (s *Server) handleACLTokenCreate(w http.ResponseWriter, r *http.Request) error {
	var req api.ACLTokenRequest
	if err := decodeJSONBody(w, r, 64<<10, "token request", "acl token", &req); err != nil {
		return err
	}
	if len(req.Policies) == 0 {
		return fmt.Errorf("acl token: %w: policies: want at least one policy name", ErrInvalidBody)
	}
	if len(req.Description) > 1024 {
		return fmt.Errorf("acl token: %w: description longer than 1024 bytes", ErrInvalidBody)
	}
	var ttl time.Duration
	if req.ExpirationTTL != "" {
		var err error
		if ttl, err = time.ParseDuration(req.ExpirationTTL); err != nil || ttl < api.MinTokenTTL {
			return fmt.Errorf("acl token: %w: expiration_ttl %q: want a duration of at least %v (\"30m\", \"24h\")",
				ErrInvalidBody, req.ExpirationTTL, api.MinTokenTTL)
		}
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return fmt.Errorf("acl token: %w", err)
	}
	txn := &fsm.Txn{}
	for _, p := range req.Policies {
		pol, ok := st.Policy(p)
		if !ok {
			return fmt.Errorf("acl token: %w: no policy %q", ErrInvalidBody, p)
		}
		// The policy must still be there when the token is stored.
		txn.Compares = append(txn.Compares, fsm.Compare{Key: []byte(acl.PoliciesPrefix + p),
			Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: pol.Revision})
	}
	if err := checkGrant(ctx, "create the token", st.PoliciesNamed(req.Policies)...); err != nil {
		return fmt.Errorf("acl token: %w", err)
	}
	rec, hash, out, err := newToken(req.Description, req.Policies, ttl)
	if err != nil {
		return err
	}
	txn.Success = []fsm.Op{{Type: fsm.OpPut, Key: []byte(acl.TokensPrefix + hash.String()), Value: mustJSON(rec)}}
	ok, err := s.applyACL(ctx, txn)
	if err != nil {
		return fmt.Errorf("acl token: %w", err)
	}
	if !ok {
		return fmt.Errorf("acl token: %w: a policy changed meanwhile; try again", ErrConflict)
	}
	s.log.Info("acl: token created", "accessor_id", rec.AccessorID, "policies", strings.Join(rec.Policies, ","))
	writeJSON(w, http.StatusOK, out)
	return nil
}

func tokenAPI(t *acl.Token) api.ACLToken {
	return api.ACLToken{AccessorID: t.Record().AccessorID, Description: t.Record().Description, Policies: t.Record().Policies,
		CreateTime: t.Record().CreateTime, ExpirationTime: t.Record().ExpirationTime}
}

func (s *Server) handleACLTokenList(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return fmt.Errorf("acl tokens: %w", err)
	}
	resp := api.ACLTokensResponse{Tokens: []api.ACLToken{}}
	for _, t := range st.Tokens() {
		resp.Tokens = append(resp.Tokens, tokenAPI(t))
	}
	sort.Slice(resp.Tokens, func(i, j int) bool {
		a, b := resp.Tokens[i], resp.Tokens[j]
		return a.CreateTime < b.CreateTime || (a.CreateTime == b.CreateTime && a.AccessorID < b.AccessorID)
	})
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) handleACLTokenSelf(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	az := authzOf(r.Context())
	if az == nil {
		return fmt.Errorf("%w: ACLs are not enforced on this cluster yet, so there is no calling token", ErrNoRoute)
	}
	st, err := s.aclStateNow(r.Context())
	if err != nil {
		return err
	}
	for _, t := range st.Tokens() {
		if t.Record().AccessorID == az.Accessor() {
			writeJSON(w, http.StatusOK, tokenAPI(t))
			return nil
		}
	}
	return fmt.Errorf("%w: the token was deleted", ErrUnauthorized)
}

func (s *Server) handleACLTokenDelete(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	acc := r.PathValue("accessor")
	ctx, cancel := s.requestContext(r)
	defer cancel()
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return fmt.Errorf("acl token delete: %w", err)
	}
	for h, t := range st.Tokens() {
		if t.Record().AccessorID != acc {
			continue
		}
		if err := checkGrant(ctx, "delete the token", st.PoliciesNamed(t.Record().Policies)...); err != nil {
			return fmt.Errorf("acl token delete: %w", err)
		}
		key := []byte(acl.TokensPrefix + h.String())
		if _, err := s.applyACL(ctx, &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpDelete, Key: key}}}); err != nil {
			return fmt.Errorf("acl token delete: %w", err)
		}
		s.log.Info("acl: token deleted", "accessor_id", acc)
		writeJSON(w, http.StatusOK, map[string]string{"deleted": acc})
		return nil
	}
	return fmt.Errorf("acl token delete: %w: no token with accessor id %q", fsm.ErrKeyNotFound, acc)
}

func (s *Server) handleACLPolicyList(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return fmt.Errorf("acl policies: %w", err)
	}
	resp := api.ACLPoliciesResponse{Policies: []api.ACLPolicy{}}
	for p := range st.Policies() {
		resp.Policies = append(resp.Policies, p)
	}
	slices.SortFunc(resp.Policies, func(a, b api.ACLPolicy) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (s *Server) handleACLPolicyGet(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return fmt.Errorf("acl policy: %w", err)
	}
	p, ok := st.Policy(r.PathValue("name"))
	if !ok {
		return fmt.Errorf("acl policy: %w: no policy %q", fsm.ErrKeyNotFound, r.PathValue("name"))
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// handleACLPolicyPut creates or replaces a policy; a Revision in the body makes it a
// compare-and-swap on the stored one.
func (s *Server) handleACLPolicyPut(w http.ResponseWriter, r *http.Request) error {
	if err := checkPolicyWritable(r.PathValue("name")); err != nil {
		return err
	}
	var p api.ACLPolicy
	if err := decodeJSONBody(w, r, 256<<10, "policy", "acl policy", &p); err != nil {
		return err
	}
	name := r.PathValue("name")
	if p.Name == "" {
		p.Name = name
	}
	if p.Name != name {
		return fmt.Errorf("acl policy: %w: body names %q, path %q", ErrInvalidBody, p.Name, name)
	}
	if err := validatePolicy(p); err != nil {
		return fmt.Errorf("acl policy: %w", err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.checkPolicyChange(ctx, "write the policy", &p); err != nil {
		return err
	}
	key := []byte(acl.PoliciesPrefix + p.Name)
	txn := &fsm.Txn{}
	if p.Revision > 0 {
		txn.Compares = []fsm.Compare{{Key: key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: p.Revision}}
	}
	p.Revision = 0
	txn.Success = []fsm.Op{{Type: fsm.OpPut, Key: key, Value: mustJSON(p)}}
	ok, err := s.applyACL(ctx, txn)
	if err != nil {
		return fmt.Errorf("acl policy: %w", err)
	}
	if !ok {
		return fmt.Errorf("acl policy %q: %w: it changed since the given revision", p.Name, ErrConflict)
	}
	s.log.Info("acl: policy written", "name", p.Name)
	st, _ := s.aclStateNow(ctx)
	if st != nil {
		if cur, ok := st.Policy(p.Name); ok {
			p = cur
		}
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// checkPolicyChange refuses to replace (or delete) policy p.Name unless the calling
// token holds every right of the stored policy and of p (checkGrant).
func (s *Server) checkPolicyChange(ctx context.Context, what string, p *api.ACLPolicy) error {
	if authzOf(ctx) == nil {
		return nil
	}
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return fmt.Errorf("acl policy: %w", err)
	}
	policies := []api.ACLPolicy{*p}
	if old, ok := st.Policy(p.Name); ok {
		policies = append(policies, old)
	}
	if err := checkGrant(ctx, what, policies...); err != nil {
		return fmt.Errorf("acl policy: %w", err)
	}
	return nil
}

func (s *Server) handleACLPolicyDelete(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := checkPolicyWritable(name); err != nil {
		return err
	}
	key := []byte(acl.PoliciesPrefix + name)
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.checkPolicyChange(ctx, "delete the policy", &api.ACLPolicy{Name: name}); err != nil {
		return err
	}
	ok, err := s.applyACL(ctx, &fsm.Txn{
		Compares: []fsm.Compare{{Key: key, Target: fsm.TargetExists, Result: fsm.CompareEqual, Int: 1}},
		Success:  []fsm.Op{{Type: fsm.OpDelete, Key: key}},
	})
	if err != nil {
		return fmt.Errorf("acl policy delete: %w", err)
	}
	if !ok {
		return fmt.Errorf("acl policy delete: %w: no policy %q", fsm.ErrKeyNotFound, name)
	}
	s.log.Info("acl: policy deleted", "name", name)
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
	return nil
}
