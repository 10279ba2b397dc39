package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestRightBeforeRequest: a token without the right an operation needs is refused
// with 403 before its request is read or judged — a bad body, a bad parameter or an
// impossible lease ID from such a caller is still a 403, never the 400 that would
// tell it the request was looked at (kills: the ACL, compaction and lease routes
// asking the core's right only after decoding, as they did once the route table left
// the right to the core).
func TestRightBeforeRequest(t *testing.T) {
	as := newACLServer(t)
	reader := as.tokenFor("reader", "app/", api.AccessRead) // no write right: no leases
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, api.PathACLTokens, `{"policies":`},
		{http.MethodPost, api.PathACLTokens, `{"policies":["nope"],"bogus":1}`},
		{http.MethodPut, api.PathACLPolicies + "/p", `not json`},
		{http.MethodGet, api.PathACLPolicies + "?bogus=1", ``},
		{http.MethodDelete, api.PathACLTokens + "/x?bogus=1", ``},
		{http.MethodPost, api.PathCompact, `{"revision":`},
		{http.MethodPost, api.PathLeases, `{"ttl":-5}`},
		{http.MethodGet, api.PathLeases + "?bogus=1", ``},
		{http.MethodGet, api.PathLeases + "/0", ``},
		{http.MethodDelete, api.PathLeases + "/abc", ``},
		{http.MethodPost, api.PathLeases + "/0/keepalive", ``},
	} {
		code, b := as.doAs(reader, c.method, c.path, []byte(c.body))
		var e api.Error
		json.Unmarshal(b, &e)
		if code != http.StatusForbidden || e.Reason != api.ReasonForbidden {
			t.Errorf("%s %s %q without the right = %d %s, want 403 Forbidden", c.method, c.path, c.body, code, b)
		}
	}
}
