package httpapi

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestLeaseRightsFollowKeys: a lease holding app/ keys, granted by a writer of app/,
// is neither shown nor revocable by a writer of other/ only, on HTTP and on the
// stream; its owner revokes it.
//
//	lease L: app/session-1, app/session-2 (granted by app)
//	other (write other/):  GET L 403, list without L, DELETE L 403, stream revoke 403
//	app   (write app/):    list with L, DELETE L 200 (both keys deleted)
func TestLeaseRightsFollowKeys(t *testing.T) {
	as := newACLServer(t)
	other := as.tokenFor("other-write", "other/", api.AccessWrite)
	app := as.tokenFor("app-write", "app/", api.AccessWrite)
	var g api.LeaseGrantResponse
	as.mustAs(app, http.MethodPost, api.PathLeases, []byte(`{"ttl":60}`), http.StatusOK, &g)
	id := strconv.FormatInt(g.ID, 10)
	for _, k := range []string{"app/session-1", "app/session-2"} {
		as.mustAs(app, http.MethodPut, api.PathKV+k+"?lease="+id, []byte("v"), http.StatusOK, nil)
	}

	if code, b := as.doAs(other, http.MethodGet, api.PathLeases+"/"+id, nil); code != http.StatusForbidden ||
		bytes.Contains(b, []byte("app/")) {
		t.Errorf("GET lease as other = %d %s, want 403 naming no key", code, b)
	}
	if ids := leaseIDs(as, other); len(ids) != 0 {
		t.Errorf("lease list as other = %v, want none", ids)
	}
	if ids := leaseIDs(as, app); len(ids) != 1 || ids[0] != g.ID {
		t.Errorf("lease list as app = %v, want [%d]", ids, g.ID)
	}

	conn, br := rawStreamWith(t, as.testServer, "Authorization: Bearer "+other+"\r\n")
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 7, Op: api.StreamLeaseRevoke, LeaseID: g.ID}))
	if r := readResponse(t, br); r.Err == nil || r.Err.Code != http.StatusForbidden {
		t.Errorf("stream revoke as other = %+v (err %+v), want 403", r, r.Err)
	}
	as.mustAs(as.root, http.MethodGet, api.PathKV+"app/session-1", nil, http.StatusOK, nil)
	if code, b := as.doAs(other, http.MethodDelete, api.PathLeases+"/"+id, nil); code != http.StatusForbidden {
		t.Errorf("DELETE lease as other = %d %s, want 403", code, b)
	}
	as.mustAs(as.root, http.MethodGet, api.PathKV+"app/session-1", nil, http.StatusOK, nil)

	var rv api.LeaseRevokeResponse
	as.mustAs(app, http.MethodDelete, api.PathLeases+"/"+id, nil, http.StatusOK, &rv)
	if rv.Deleted != 2 {
		t.Errorf("revoke as app deleted %d keys, want 2", rv.Deleted)
	}
}

func leaseIDs(as *aclServer, secret string) []int64 {
	as.t.Helper()
	var l api.LeaseListResponse
	as.mustAs(secret, http.MethodGet, api.PathLeases, nil, http.StatusOK, &l)
	var ids []int64
	for _, x := range l.Leases {
		ids = append(ids, x.ID)
	}
	return ids
}
