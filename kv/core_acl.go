package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// ACL management: bootstrap, tokens and policies (acl.go holds the records they write
// and the node's view of them). Every method but ACLBootstrap and ACLTokenSelf needs
// the acl right; creating a token, or writing or deleting a policy, also needs every
// right the policies grant (checkGrant).

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

// CheckACLManagement is nil when c may manage ACL tokens and policies (the acl right):
// every ACL method but ACLBootstrap and ACLTokenSelf checks it first, and a door that
// reads a request body asks it before reading, so that a caller without the right is
// refused before anything of its request is read or judged.
func (s *Server) CheckACLManagement(c Caller) error { return checkRight(c.az, api.RightACL) }

// ACLBootstrap creates, once per cluster, the management policy and a token bound to
// it, and returns the token with its secret (the only time it is shown). The
// bootstrap record is created with a compare on version 0, so of two concurrent
// bootstraps exactly one succeeds; later ones are ErrAlreadyBootstrapped. It needs no
// token.
func (s *Server) ACLBootstrap(ctx context.Context) (api.ACLToken, error) {
	if err := s.bootstrapOpen(ctx); err != nil {
		return api.ACLToken{}, err
	}
	rec, hash, out, err := newToken("bootstrap management token", []string{api.ManagementPolicy}, 0)
	if err != nil {
		return api.ACLToken{}, err
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
	ok, err := s.applyACL(ctx, txn)
	if err != nil {
		return api.ACLToken{}, fmt.Errorf("acl bootstrap: %w", err)
	}
	if !ok {
		return api.ACLToken{}, errBootstrapped()
	}
	s.log.Info("acl: bootstrapped", "accessor_id", rec.AccessorID)
	return out, nil
}

// bootstrapOpen refuses a bootstrap, before anything is proposed, when this node's ACL
// state already shows the cluster bootstrapped: the operation needs no token, so each
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

// ACLTokenCreate mints a token bound to req's policies and returns it with its
// secret (shown once).
func (s *Server) ACLTokenCreate(ctx context.Context, c Caller, req api.ACLTokenRequest) (api.ACLToken, error) {
	if err := s.CheckACLManagement(c); err != nil {
		return api.ACLToken{}, err
	}
	ctx = c.context(ctx)
	if len(req.Policies) == 0 {
		return api.ACLToken{}, fmt.Errorf("acl token: %w: policies: want at least one policy name", ErrInvalidBody)
	}
	if len(req.Description) > 1024 {
		return api.ACLToken{}, fmt.Errorf("acl token: %w: description longer than 1024 bytes", ErrInvalidBody)
	}
	var ttl time.Duration
	if req.ExpirationTTL != "" {
		var err error
		if ttl, err = time.ParseDuration(req.ExpirationTTL); err != nil || ttl < api.MinTokenTTL {
			return api.ACLToken{}, fmt.Errorf("acl token: %w: expiration_ttl %q: want a duration of at least %v (\"30m\", \"24h\")",
				ErrInvalidBody, req.ExpirationTTL, api.MinTokenTTL)
		}
	}
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return api.ACLToken{}, fmt.Errorf("acl token: %w", err)
	}
	txn := &fsm.Txn{}
	for _, p := range req.Policies {
		pol, ok := st.Policy(p)
		if !ok {
			return api.ACLToken{}, fmt.Errorf("acl token: %w: no policy %q", ErrInvalidBody, p)
		}
		// The policy must still be there when the token is stored.
		txn.Compares = append(txn.Compares, fsm.Compare{Key: []byte(acl.PoliciesPrefix + p),
			Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: pol.Revision})
	}
	if err := checkGrant(ctx, "create the token", st.PoliciesNamed(req.Policies)...); err != nil {
		return api.ACLToken{}, fmt.Errorf("acl token: %w", err)
	}
	rec, hash, out, err := newToken(req.Description, req.Policies, ttl)
	if err != nil {
		return api.ACLToken{}, err
	}
	txn.Success = []fsm.Op{{Type: fsm.OpPut, Key: []byte(acl.TokensPrefix + hash.String()), Value: mustJSON(rec)}}
	ok, err := s.applyACL(ctx, txn)
	if err != nil {
		return api.ACLToken{}, fmt.Errorf("acl token: %w", err)
	}
	if !ok {
		return api.ACLToken{}, fmt.Errorf("acl token: %w: a policy changed meanwhile; try again", ErrConflict)
	}
	s.log.Info("acl: token created", "accessor_id", rec.AccessorID, "policies", strings.Join(rec.Policies, ","))
	return out, nil
}

func tokenAPI(t *acl.Token) api.ACLToken {
	return api.ACLToken{AccessorID: t.Record().AccessorID, Description: t.Record().Description, Policies: t.Record().Policies,
		CreateTime: t.Record().CreateTime, ExpirationTime: t.Record().ExpirationTime, User: t.Record().User}
}

// ACLTokens lists every token (without secrets), oldest first.
func (s *Server) ACLTokens(ctx context.Context, c Caller) (api.ACLTokensResponse, error) {
	if err := s.CheckACLManagement(c); err != nil {
		return api.ACLTokensResponse{}, err
	}
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return api.ACLTokensResponse{}, fmt.Errorf("acl tokens: %w", err)
	}
	resp := api.ACLTokensResponse{Tokens: []api.ACLToken{}}
	for _, t := range st.Tokens() {
		resp.Tokens = append(resp.Tokens, tokenAPI(t))
	}
	sort.Slice(resp.Tokens, func(i, j int) bool {
		a, b := resp.Tokens[i], resp.Tokens[j]
		return a.CreateTime < b.CreateTime || (a.CreateTime == b.CreateTime && a.AccessorID < b.AccessorID)
	})
	return resp, nil
}

// ACLTokenSelf is the caller's own token (without its secret); any valid token may
// read it. Without enforced ACLs there is no calling token: ErrNoRoute.
func (s *Server) ACLTokenSelf(ctx context.Context, c Caller) (api.ACLToken, error) {
	if c.az == nil {
		return api.ACLToken{}, fmt.Errorf("%w: ACLs are not enforced on this cluster yet, so there is no calling token", ErrNoRoute)
	}
	st, err := s.aclStateNow(ctx)
	if err != nil {
		return api.ACLToken{}, err
	}
	for _, t := range st.Tokens() {
		if t.Record().AccessorID == c.az.Accessor() {
			return tokenAPI(t), nil
		}
	}
	return api.ACLToken{}, fmt.Errorf("%w: the token was deleted", ErrUnauthorized)
}

// ACLTokenDelete deletes the token with accessor ID acc; the caller must hold every
// right its policies grant.
func (s *Server) ACLTokenDelete(ctx context.Context, c Caller, acc string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
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
		return nil
	}
	return fmt.Errorf("acl token delete: %w: no token with accessor id %q", fsm.ErrKeyNotFound, acc)
}

// ACLPolicies lists every policy by name.
func (s *Server) ACLPolicies(ctx context.Context, c Caller) (api.ACLPoliciesResponse, error) {
	if err := s.CheckACLManagement(c); err != nil {
		return api.ACLPoliciesResponse{}, err
	}
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return api.ACLPoliciesResponse{}, fmt.Errorf("acl policies: %w", err)
	}
	resp := api.ACLPoliciesResponse{Policies: []api.ACLPolicy{}}
	for p := range st.Policies() {
		resp.Policies = append(resp.Policies, p)
	}
	slices.SortFunc(resp.Policies, func(a, b api.ACLPolicy) int { return strings.Compare(a.Name, b.Name) })
	return resp, nil
}

// ACLPolicy is the policy called name.
func (s *Server) ACLPolicy(ctx context.Context, c Caller, name string) (api.ACLPolicy, error) {
	if err := s.CheckACLManagement(c); err != nil {
		return api.ACLPolicy{}, err
	}
	st, err := s.reloadACL(ctx, fsm.Linearizable)
	if err != nil {
		return api.ACLPolicy{}, fmt.Errorf("acl policy: %w", err)
	}
	p, ok := st.Policy(name)
	if !ok {
		return api.ACLPolicy{}, fmt.Errorf("acl policy: %w: no policy %q", fsm.ErrKeyNotFound, name)
	}
	return p, nil
}

// ACLPolicyPut creates or replaces the policy called name with p (p.Name empty or
// name); a Revision in p makes it a compare-and-swap on the stored one. It returns
// the stored policy.
func (s *Server) ACLPolicyPut(ctx context.Context, c Caller, name string, p api.ACLPolicy) (api.ACLPolicy, error) {
	if err := s.CheckACLManagement(c); err != nil {
		return api.ACLPolicy{}, err
	}
	ctx = c.context(ctx)
	if err := checkPolicyWritable(name); err != nil {
		return api.ACLPolicy{}, err
	}
	if p.Name == "" {
		p.Name = name
	}
	if p.Name != name {
		return api.ACLPolicy{}, fmt.Errorf("acl policy: %w: body names %q, path %q", ErrInvalidBody, p.Name, name)
	}
	if err := validatePolicy(p); err != nil {
		return api.ACLPolicy{}, fmt.Errorf("acl policy: %w", err)
	}
	if err := s.checkPolicyChange(ctx, "write the policy", &p); err != nil {
		return api.ACLPolicy{}, err
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
		return api.ACLPolicy{}, fmt.Errorf("acl policy: %w", err)
	}
	if !ok {
		return api.ACLPolicy{}, fmt.Errorf("acl policy %q: %w: it changed since the given revision", p.Name, ErrConflict)
	}
	s.log.Info("acl: policy written", "name", p.Name)
	st, _ := s.aclStateNow(ctx)
	if st != nil {
		if cur, ok := st.Policy(p.Name); ok {
			p = cur
		}
	}
	return p, nil
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

// ACLPolicyDelete deletes the policy called name.
func (s *Server) ACLPolicyDelete(ctx context.Context, c Caller, name string) error {
	if err := s.CheckACLManagement(c); err != nil {
		return err
	}
	ctx = c.context(ctx)
	if err := checkPolicyWritable(name); err != nil {
		return err
	}
	key := []byte(acl.PoliciesPrefix + name)
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
	return nil
}
