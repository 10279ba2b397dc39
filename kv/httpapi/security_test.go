package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// Helpers of the security tests: a bootstrapped server and tokens with chosen rules.

// aclServer is a test server whose ACL system is bootstrapped; root is the
// management token's secret.
type aclServer struct {
	*testServer
	root string
}

func newACLServer(t *testing.T, opts ...func(*kv.Config)) *aclServer {
	t.Helper()
	ts := newTestServer(t, opts...)
	var tok api.ACLToken
	ts.doJSON(http.MethodPost, api.PathACLBootstrap, nil, http.StatusOK, &tok)
	return &aclServer{testServer: ts, root: tok.SecretID}
}

// doAs sends one request with the bearer secret ("" = none); status and body.
func (as *aclServer) doAs(secret, method, path string, body []byte) (int, []byte) {
	as.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, as.url+path, rd)
	if err != nil {
		as.t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		as.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// mustAs is doAs expecting status want; it decodes the answer into out (if not nil).
func (as *aclServer) mustAs(secret, method, path string, body []byte, want int, out any) {
	as.t.Helper()
	code, b := as.doAs(secret, method, path, body)
	if code != want {
		as.t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			as.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// policy writes policy p (as root).
func (as *aclServer) policy(p api.ACLPolicy) {
	as.t.Helper()
	as.mustAs(as.root, http.MethodPut, api.PathACLPolicies+"/"+p.Name, mustJSON(p), http.StatusOK, nil)
}

// token creates a token for the policies (as root) and returns its secret.
func (as *aclServer) token(policies ...string) string {
	as.t.Helper()
	var tok api.ACLToken
	as.mustAs(as.root, http.MethodPost, api.PathACLTokens, mustJSON(api.ACLTokenRequest{Policies: policies}), http.StatusOK, &tok)
	return tok.SecretID
}

// tokenFor creates a policy named name with the key rules (prefix, access pairs) and
// a token for it.
func (as *aclServer) tokenFor(name string, rules ...string) string {
	as.t.Helper()
	p := api.ACLPolicy{Name: name}
	for i := 0; i+1 < len(rules); i += 2 {
		p.Keys = append(p.Keys, api.ACLKeyRule{Prefix: rules[i], Access: rules[i+1]})
	}
	as.policy(p)
	return as.token(name)
}

// waitUntil polls cond (every 10ms, at most timeout) and fails the test if it never
// holds.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not yet: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
