package httpapi

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// Bad lease input is a clear 4xx and changes nothing.
func TestLeaseBadInputChangesNothing(t *testing.T) {
	ts := newTestServer(t)
	var g api.LeaseGrantResponse
	ts.doJSON(http.MethodPost, "/v1/leases", []byte(`{"ttl":5}`), http.StatusOK, &g)
	ts.doJSON(http.MethodPut, "/v1/kv/a?lease="+strconv.FormatInt(g.ID, 10), []byte("v"), http.StatusOK, nil)
	h := ts.store.FSM().View().Hash()
	for i, tc := range []struct {
		method, path, body string
		code               int
		reason             string
	}{
		{"POST", "/v1/leases", `{"ttl":0}`, 400, api.ReasonBadRequest},
		{"POST", "/v1/leases", `{"ttl":-5}`, 400, api.ReasonBadRequest},
		{"POST", "/v1/leases", `{"ttl":86401}`, 400, api.ReasonBadRequest},
		{"POST", "/v1/leases", `{"ttl":5,"id":-1}`, 400, api.ReasonBadRequest},
		{"POST", "/v1/leases", `{"ttl":5,"id":` + strconv.FormatInt(g.ID, 10) + `}`, 409, api.ReasonConflict},
		{"POST", "/v1/leases", `{"ttl":"5"}`, 400, api.ReasonBadRequest},
		{"DELETE", "/v1/leases/123", "", 404, api.ReasonLeaseNotFound},
		{"DELETE", "/v1/leases/abc", "", 400, api.ReasonBadRequest},
		{"DELETE", "/v1/leases/0", "", 400, api.ReasonBadRequest},
		{"GET", "/v1/leases/123", "", 404, api.ReasonLeaseNotFound},
		{"POST", "/v1/leases/-4/keepalive", "", 400, api.ReasonBadRequest},
		{"PUT", "/v1/kv/b?lease=123", "v", 404, api.ReasonLeaseNotFound},
		{"PUT", "/v1/kv/b?lease=x", "v", 400, api.ReasonBadRequest},
		{"PUT", "/v1/kv/b?lease=-1", "v", 400, api.ReasonBadRequest},
		{"POST", "/v1/txn", `{"success":[{"type":"put","key":"b","lease":123}]}`, 404, api.ReasonLeaseNotFound},
		{"POST", "/v1/txn", `{"success":[{"type":"delete","key":"a","lease":1}]}`, 400, api.ReasonBadRequest},
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		var e api.Error
		ts.doJSON(tc.method, tc.path, body, tc.code, &e)
		if e.Reason != tc.reason {
			t.Errorf("#%d %s %s: reason %q, want %q (%s)", i, tc.method, tc.path, e.Reason, tc.reason, e.Message)
		}
		if ts.store.FSM().View().Hash() != h {
			t.Fatalf("#%d %s %s changed state", i, tc.method, tc.path)
		}
	}
	var l api.LeaseListResponse
	ts.doJSON(http.MethodGet, "/v1/leases", nil, http.StatusOK, &l)
	if len(l.Leases) != 1 || l.Leases[0].ID != g.ID || l.Leases[0].GrantedTTL != 5 {
		t.Fatalf("leases = %+v", l)
	}
	var r api.LeaseRevokeResponse
	ts.doJSON(http.MethodDelete, "/v1/leases/"+strconv.FormatInt(g.ID, 10), nil, http.StatusOK, &r)
	if r.Deleted != 1 {
		t.Fatalf("revoke = %+v", r)
	}
	if code, _, _ := ts.do(http.MethodGet, "/v1/kv/a", nil); code != http.StatusNotFound {
		t.Fatalf("GET a after revoke = %d", code)
	}
}
