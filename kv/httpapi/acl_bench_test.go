package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// BenchmarkGetNoACL and BenchmarkGetACL serve GET /v1/kv/{key} through the handler
// (no network) on a cluster without ACLs and on a bootstrapped one with a token whose
// policy has a few rules: the difference is the cost of authorization per request.
func BenchmarkGetNoACL(b *testing.B) { benchmarkGet(b, false) }
func BenchmarkGetACL(b *testing.B)   { benchmarkGet(b, true) }

func benchmarkGet(b *testing.B, acl bool) {
	ts := newTestServer(b)
	ts.put("app/key", "value")
	h := ts.srv.Handler()
	secret := ""
	if acl {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, api.PathACLBootstrap, nil))
		var tok api.ACLToken
		if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil || tok.SecretID == "" {
			b.Fatalf("bootstrap: %d %s", rec.Code, rec.Body)
		}
		secret = tok.SecretID
	}
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/kv/app/key?consistency=serializable", nil)
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
