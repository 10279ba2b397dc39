package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// TestTokenExpires: a token created with expiration_ttl works until then and is a 401
// naming the expiry afterwards (HTTP and the rights a stream re-checks); the expiry is
// listed; a TTL below the minimum or unparsable is a 400. Kills: authenticate without
// the expiry check; current() without it.
func TestTokenExpires(t *testing.T) {
	as := newACLServer(t)
	as.tokenFor("app-read", "app/", api.AccessRead)
	for _, bad := range []string{"1ms", "soon"} {
		req := mustJSON(api.ACLTokenRequest{Policies: []string{"app-read"}, ExpirationTTL: bad})
		if code, b := as.doAs(as.root, http.MethodPost, api.PathACLTokens, req); code != http.StatusBadRequest {
			t.Errorf("expiration_ttl %q = %d %s, want 400", bad, code, b)
		}
	}
	var tok api.ACLToken
	as.mustAs(as.root, http.MethodPost, api.PathACLTokens,
		mustJSON(api.ACLTokenRequest{Policies: []string{"app-read"}, ExpirationTTL: "2s"}), http.StatusOK, &tok)
	exp, err := time.Parse(time.RFC3339, tok.ExpirationTime)
	if err != nil || time.Until(exp) > 3*time.Second {
		t.Fatalf("expiration_time %q (%v): want about 2 s from now", tok.ExpirationTime, err)
	}
	if code, b := as.doAs(tok.SecretID, http.MethodGet, api.PathKV+"app/x", nil); code != http.StatusNotFound {
		t.Fatalf("before expiry: GET = %d %s, want 404 (served)", code, b)
	}
	var self api.ACLToken
	as.mustAs(tok.SecretID, http.MethodGet, api.PathACLTokenSelf, nil, http.StatusOK, &self)
	if self.ExpirationTime != tok.ExpirationTime {
		t.Errorf("token self shows expiry %q, want %q", self.ExpirationTime, tok.ExpirationTime)
	}
	caller, err := as.core.Authenticate(t.Context(), tok.SecretID)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the token expired", func() bool {
		code, b := as.doAs(tok.SecretID, http.MethodGet, api.PathKV+"app/x", nil)
		return code == http.StatusUnauthorized && strings.Contains(string(b), "expired")
	})
	if _, err := as.core.Refresh(caller); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("a stream's re-check after expiry = %v, want expired", err)
	}
}
