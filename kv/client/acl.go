package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/keel-kv/keel/kv/api"
)

// ACLBootstrap creates the cluster's first management token and returns it with its
// secret (POST /v1/acl/bootstrap). It succeeds once per cluster; afterwards it fails
// with a 409 (IsAlreadyBootstrapped). The secret is shown only here: keep it.
func (c *Client) ACLBootstrap(ctx context.Context) (api.ACLToken, error) {
	var out api.ACLToken
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathACLBootstrap, write: true}, &out)
	return out, err
}

// ACLTokenCreate creates a token bound to policies and returns it with its secret.
func (c *Client) ACLTokenCreate(ctx context.Context, req api.ACLTokenRequest) (api.ACLToken, error) {
	var out api.ACLToken
	err := c.postJSON(ctx, api.PathACLTokens, req, &out, true)
	return out, err
}

// ACLTokenList lists the tokens (never their secrets).
func (c *Client) ACLTokenList(ctx context.Context) ([]api.ACLToken, error) {
	var out api.ACLTokensResponse
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathACLTokens}, &out)
	return out.Tokens, err
}

// ACLTokenSelf describes the client's own token.
func (c *Client) ACLTokenSelf(ctx context.Context) (api.ACLToken, error) {
	var out api.ACLToken
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathACLTokenSelf}, &out)
	return out, err
}

// ACLTokenDelete deletes the token with accessor ID acc; requests with it fail with
// 401 from then on.
func (c *Client) ACLTokenDelete(ctx context.Context, acc string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: api.PathACLTokens + "/" + url.PathEscape(acc), write: true}, nil)
}

// ACLPolicyPut creates or replaces a policy (a non-zero p.Revision makes it a CAS).
func (c *Client) ACLPolicyPut(ctx context.Context, p api.ACLPolicy) (api.ACLPolicy, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return api.ACLPolicy{}, fmt.Errorf("client: encode policy: %w", err)
	}
	var out api.ACLPolicy
	err = c.do(ctx, call{method: http.MethodPut, path: api.PathACLPolicies + "/" + url.PathEscape(p.Name), body: body,
		ctype: "application/json", write: true}, &out)
	return out, err
}

// ACLPolicyGet returns one policy.
func (c *Client) ACLPolicyGet(ctx context.Context, name string) (api.ACLPolicy, error) {
	var out api.ACLPolicy
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathACLPolicies + "/" + url.PathEscape(name)}, &out)
	return out, err
}

// ACLPolicyList lists the policies.
func (c *Client) ACLPolicyList(ctx context.Context) ([]api.ACLPolicy, error) {
	var out api.ACLPoliciesResponse
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathACLPolicies}, &out)
	return out.Policies, err
}

// ACLPolicyDelete deletes a policy; tokens bound to it lose its rights at once.
func (c *Client) ACLPolicyDelete(ctx context.Context, name string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: api.PathACLPolicies + "/" + url.PathEscape(name), write: true}, nil)
}

// IsUnauthorized reports whether err is a 401: no token, or one the cluster does not
// know, where ACLs require one.
func IsUnauthorized(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusUnauthorized
}

// IsForbidden reports whether err is a 403 Forbidden: the token lacks the right the
// message names. Nothing was changed.
func IsForbidden(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusForbidden && e.Reason == api.ReasonForbidden
}

// IsAlreadyBootstrapped reports whether err is the 409 of a second ACL bootstrap.
func IsAlreadyBootstrapped(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusConflict && e.Reason == api.ReasonAlreadyBootstrapped
}
