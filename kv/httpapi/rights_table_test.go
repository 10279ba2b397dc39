package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv/api"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// The rights table (kv/internal/rightstest) over the HTTP routes; the stream
// protocol's door is in kv/stream (rights_test.go), the etcd API's in kv/etcdv3.

// httpDoor carries the cases over the HTTP routes.
type httpDoor struct{ f *rt.Fixture }

func (d httpDoor) Do(t *testing.T, secret string, op rt.Op) rt.Answer {
	t.Helper()
	method, path, body := http.MethodGet, api.PathKV+op.Key, ""
	switch op.Kind {
	case rt.Get:
		q := []string{}
		if op.Serializable {
			q = append(q, "consistency=serializable")
		}
		if op.Revision > 0 {
			q = append(q, fmt.Sprintf("revision=%d", op.Revision))
		}
		if len(q) > 0 {
			path += "?" + strings.Join(q, "&")
		}
	case rt.Range:
		path += "?list=true"
		if op.Limit != 0 {
			path += fmt.Sprintf("&limit=%d", op.Limit)
		}
	case rt.Put:
		method, body = http.MethodPut, string(op.PutValue())
		if op.Lease {
			path += fmt.Sprintf("?lease=%d", d.f.LeaseOf(op))
		}
	case rt.Delete:
		method = http.MethodDelete
		if op.HasPrev {
			path += fmt.Sprintf("?prev_revision=%d", op.Prev)
		}
	case rt.DeleteRange:
		method, path = http.MethodDelete, path+"?prefix=true"
		if op.HasPrev {
			path += fmt.Sprintf("&prev_revision=%d", op.Prev)
		}
	case rt.Watch:
		path = api.PathWatch + op.Key
		if op.Prefix {
			path += "?prefix=true"
		}
	case rt.Txn:
		method, path, body = http.MethodPost, api.PathTxn, string(rt.MustJSON(op.Txn))
		if op.Body != nil {
			body = string(op.Body)
		}
	case rt.LeaseGrant:
		method, path, body = http.MethodPost, api.PathLeases, `{"ttl":600}`
	case rt.LeaseKeepAlive:
		method, path = http.MethodPost, fmt.Sprintf("%s/%d/keepalive", api.PathLeases, d.f.LeaseOf(op))
	case rt.LeaseRevoke:
		method, path = http.MethodDelete, fmt.Sprintf("%s/%d", api.PathLeases, d.f.LeaseOf(op))
	case rt.LeaseTimeToLive:
		path = fmt.Sprintf("%s/%d", api.PathLeases, d.f.LeaseOf(op))
	case rt.LeaseList:
		path = api.PathLeases
	case rt.Compact:
		method, path, body = http.MethodPost, api.PathCompact, string(rt.MustJSON(api.CompactRequest{Revision: op.Revision}))
	case rt.MemberList, rt.MemberRemove, rt.Snapshot, rt.MoveLeader: // the agent's routes (cmd), not kv.Server's
		return rt.NotServed
	case rt.HashKV, rt.Defragment: // etcd's alone
		return rt.NotServed
	default:
		t.Fatalf("http door: op %d unknown", op.Kind)
	}
	code, b := d.f.HTTPDo(t, secret, method, path, body)
	if code < 400 && op.Kind == rt.Range {
		return rt.ListAnswer(b)
	}
	if code < 400 && op.Kind == rt.LeaseList {
		var l api.LeaseListResponse
		json.Unmarshal(b, &l)
		a := rt.Answer{}
		for _, x := range l.Leases {
			a.Leases = append(a.Leases, x.ID)
		}
		return a
	}
	if code < 400 {
		return rt.Answer{}
	}
	var e api.Error
	json.Unmarshal(bytes.TrimSpace(b), &e)
	return rt.Answer{Code: code, Reason: e.Reason, Msg: e.Message}
}

// TestHTTPRightsTable: the rights table over the HTTP routes — the same cases as the
// stream's and the etcd API's, refused 403 without their right, 401 without a token
// or with a deleted one.
func TestHTTPRightsTable(t *testing.T) {
	f := rt.New(t)
	d := httpDoor{f}
	rt.RunRightCases(t, f, d)
	rt.RunUnauthorizedCases(t, f, d, "", "no token")
	gone := f.NewToken(t, rt.Policies[rt.NeedRead].Name)
	f.DeleteToken(t, gone)
	rt.RunUnauthorizedCases(t, f, d, gone.SecretID, "a deleted token")
}

// TestHTTPLeaseOwner: a lease is its granter's on /v1/leases — another tenant's
// token neither lists it nor renews, looks up or revokes it, with keys attached or
// not; a token of the owner's policy and a management token do.
func TestHTTPLeaseOwner(t *testing.T) {
	f := rt.New(t)
	rt.RunLeaseOwnerCases(t, f, httpDoor{f})
}

// TestHTTPRulesTable: the rules table (key limits and UTF-8, the value limit, the
// reserved prefix, duplicate keys) over the HTTP routes, with every right.
func TestHTTPRulesTable(t *testing.T) {
	f := rt.New(t)
	rt.RunRuleCases(t, f, httpDoor{f})
}

// TestLeaseWithoutOwner: leases granted before ACLs were bootstrapped have no owner;
// under ACLs their keys decide, and one without keys is a management token's alone.
//
//	L1: app/held (granted and attached without ACLs)    L2: no key
//	app (write app/):     list [L1], keepalive L1 200, keepalive L2 403
//	other (write other/): list [], keepalive L1 403, keepalive L2 403, put with L2 403
//	management:           list [L1 L2], keepalive both 200
func TestLeaseWithoutOwner(t *testing.T) {
	f := rt.NewOpen(t)
	var l1, l2 api.LeaseGrantResponse
	f.MustHTTP(t, "", http.MethodPost, api.PathLeases, `{"ttl":60}`, &l1)
	f.MustHTTP(t, "", http.MethodPost, api.PathLeases, `{"ttl":60}`, &l2)
	f.MustHTTP(t, "", http.MethodPut, fmt.Sprintf("%sapp/held?lease=%d", api.PathKV, l1.ID), "v", nil)
	f.Bootstrap(t)
	f.WaitLessor(t, l1.ID)
	for _, p := range []api.ACLPolicy{
		{Name: "app-write", Keys: []api.ACLKeyRule{{Prefix: "app/", Access: api.AccessWrite}}},
		{Name: "other-write", Keys: []api.ACLKeyRule{{Prefix: "other/", Access: api.AccessWrite}}},
	} {
		f.MustHTTP(t, f.Mgmt, http.MethodPut, api.PathACLPolicies+"/"+p.Name, string(rt.MustJSON(p)), nil)
	}
	app, other := f.NewToken(t, "app-write").SecretID, f.NewToken(t, "other-write").SecretID
	d := httpDoor{f}
	both := []int64{l1.ID, l2.ID}
	slices.Sort(both)
	for _, tc := range []struct {
		who, secret string
		list        []int64
		ka1, ka2    int
	}{
		{"app", app, []int64{l1.ID}, 0, http.StatusForbidden},
		{"other", other, nil, http.StatusForbidden, http.StatusForbidden},
		{"management", f.Mgmt, both, 0, 0},
	} {
		if a := d.Do(t, tc.secret, rt.Op{Kind: rt.LeaseList}); !slices.Equal(a.Leases, tc.list) {
			t.Errorf("%s: lease list %d %v, want %v", tc.who, a.Code, a.Leases, tc.list)
		}
		if a := d.Do(t, tc.secret, rt.Op{Kind: rt.LeaseKeepAlive, LeaseID: l1.ID}); a.Code != tc.ka1 {
			t.Errorf("%s: keepalive of the lease with app/held = %d %q, want %d", tc.who, a.Code, a.Msg, tc.ka1)
		}
		if a := d.Do(t, tc.secret, rt.Op{Kind: rt.LeaseKeepAlive, LeaseID: l2.ID}); a.Code != tc.ka2 {
			t.Errorf("%s: keepalive of the lease without keys = %d %q, want %d", tc.who, a.Code, a.Msg, tc.ka2)
		}
	}
	if a := d.Do(t, other, rt.Op{Kind: rt.Put, Key: "other/k", Lease: true, LeaseID: l2.ID}); a.Code != http.StatusForbidden {
		t.Errorf("put other/k with the lease without keys as other = %d %q, want 403", a.Code, a.Msg)
	}
}
