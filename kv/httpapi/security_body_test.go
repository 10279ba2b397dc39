package httpapi

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestRightsBeforeBody: a read-only token's oversized PUT is refused for its rights
// (403), not for its size (413): the rights are checked before the body is read
// (kills: the check left to putKey, after readBody).
func TestRightsBeforeBody(t *testing.T) {
	as := newACLServer(t)
	reader := as.tokenFor("app-read", "app/", api.AccessRead)
	big := bytes.Repeat([]byte{'x'}, 2<<20) // over MaxValueBytes (1.5 MiB)
	if code, b := as.doAs(reader, http.MethodPut, api.PathKV+"app/k", big); code != http.StatusForbidden {
		t.Errorf("oversized PUT with a read-only token = %d %.200s, want 403", code, b)
	}
	if code, b := as.doAs(reader, http.MethodPut, api.PathKV+"app/k", []byte("v")); code != http.StatusForbidden {
		t.Errorf("small PUT with a read-only token = %d %s, want 403", code, b)
	}
	if code, b := as.doAs(as.root, http.MethodPut, api.PathKV+"app/k", big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized PUT with root = %d %.200s, want 413", code, b)
	}
}
