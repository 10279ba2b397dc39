package rightstest

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// RunLeaseOwnerCases runs through d the lease ownership story of issue #33 (item 5):
// a lease is its owner's from its grant on, whether keys are attached or not.
//
//	tenant A (write app/) grants leases L1 and L2        both owned by A's policies
//	A attaches app/lock to L2 (L1 keeps no key)
//	tenant B (write other/): list without L1 or L2; keepalive, time to live and
//	    revoke of either 403; both leases and app/lock still there
//	A' (a token re-issued for A's policy): list with both, keepalive, time to live
//	management token: list with both, keepalive, time to live
//	A revokes L2: app/lock is deleted; A revokes L1
//
// Doors that do not serve an operation (NotServed) skip it.
func RunLeaseOwnerCases(t *testing.T, f *Fixture, d Door) {
	t.Helper()
	f.MustHTTP(t, f.Mgmt, http.MethodPut, api.PathACLPolicies+"/tenant-a", string(MustJSON(api.ACLPolicy{
		Name: "tenant-a", Keys: []api.ACLKeyRule{{Prefix: "app/", Access: api.AccessWrite}}})), nil)
	f.MustHTTP(t, f.Mgmt, http.MethodPut, api.PathACLPolicies+"/tenant-b", string(MustJSON(api.ACLPolicy{
		Name: "tenant-b", Keys: []api.ACLKeyRule{{Prefix: Other, Access: api.AccessWrite}}})), nil)
	a, a2, b := f.NewToken(t, "tenant-a").SecretID, f.NewToken(t, "tenant-a").SecretID, f.NewToken(t, "tenant-b").SecretID
	var g1, g2 api.LeaseGrantResponse
	f.MustHTTP(t, a, http.MethodPost, api.PathLeases, `{"ttl":600}`, &g1)
	f.MustHTTP(t, a, http.MethodPost, api.PathLeases, `{"ttl":600}`, &g2)
	f.MustHTTP(t, a, http.MethodPut, fmt.Sprintf("%sapp/lock?lease=%d", api.PathKV, g2.ID), "me", nil)
	leases := []struct {
		what string
		id   int64
	}{{"tenant A's lease without keys", g1.ID}, {"tenant A's lease with app/lock", g2.ID}}

	if got := d.Do(t, b, Op{Kind: LeaseList}); !got.NotServed &&
		(got.Code != 0 || slices.Contains(got.Leases, g1.ID) || slices.Contains(got.Leases, g2.ID)) {
		t.Errorf("lease list by tenant B = %d %q %v; want neither %d nor %d", got.Code, got.Msg, got.Leases, g1.ID, g2.ID)
	}
	for _, l := range leases {
		for _, k := range []Kind{LeaseKeepAlive, LeaseTimeToLive, LeaseRevoke} {
			if got := d.Do(t, b, Op{Kind: k, LeaseID: l.id}); !got.NotServed && !refused(got) {
				t.Errorf("%s of %s by tenant B = %d %s %q; want 403 Forbidden", kindName(k), l.what, got.Code, got.Reason, got.Msg)
			}
		}
		if _, ok := f.Store.FSM().View().Lease(l.id); !ok {
			t.Errorf("tenant B's requests revoked %s", l.what)
		}
	}
	if code, _ := f.HTTPDo(t, f.Mgmt, http.MethodGet, api.PathKV+"app/lock", ""); code != http.StatusOK {
		t.Fatalf("app/lock after tenant B's requests: %d, want 200", code)
	}

	for _, who := range []struct{ name, secret string }{{"a token re-issued for tenant A", a2}, {"the management token", f.Mgmt}} {
		if got := d.Do(t, who.secret, Op{Kind: LeaseList}); !got.NotServed &&
			(got.Code != 0 || !slices.Contains(got.Leases, g1.ID) || !slices.Contains(got.Leases, g2.ID)) {
			t.Errorf("lease list by %s = %d %q %v; want it with %d and %d", who.name, got.Code, got.Msg, got.Leases, g1.ID, g2.ID)
		}
		for _, l := range leases {
			for _, k := range []Kind{LeaseKeepAlive, LeaseTimeToLive} {
				if got := d.Do(t, who.secret, Op{Kind: k, LeaseID: l.id}); got.Code != 0 {
					t.Errorf("%s of %s by %s = %d %s %q; want it served", kindName(k), l.what, who.name, got.Code, got.Reason, got.Msg)
				}
			}
		}
	}
	for _, l := range leases {
		if got := d.Do(t, a, Op{Kind: LeaseRevoke, LeaseID: l.id}); got.Code != 0 {
			t.Errorf("revoke of %s by its owner = %d %s %q; want it served", l.what, got.Code, got.Reason, got.Msg)
		}
	}
	if code, _ := f.HTTPDo(t, f.Mgmt, http.MethodGet, api.PathKV+"app/lock", ""); code != http.StatusNotFound {
		t.Errorf("app/lock after its lease's revoke: %d, want 404", code)
	}
}

// LeaseOf is the lease op names: its LeaseID, or the fixture's.
func (f *Fixture) LeaseOf(op Op) int64 {
	if op.LeaseID != 0 {
		return op.LeaseID
	}
	return f.Lease
}

func kindName(k Kind) string {
	switch k {
	case LeaseKeepAlive:
		return "keepalive"
	case LeaseTimeToLive:
		return "time to live"
	case LeaseRevoke:
		return "revoke"
	}
	return fmt.Sprintf("op %d", k)
}
