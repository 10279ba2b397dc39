package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
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
			path += fmt.Sprintf("?lease=%d", d.f.Lease)
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
		method, path = http.MethodPost, fmt.Sprintf("%s/%d/keepalive", api.PathLeases, d.f.Lease)
	case rt.LeaseRevoke:
		method, path = http.MethodDelete, fmt.Sprintf("%s/%d", api.PathLeases, d.f.Lease)
	case rt.LeaseTimeToLive:
		path = fmt.Sprintf("%s/%d", api.PathLeases, d.f.Lease)
	case rt.LeaseList:
		path = api.PathLeases
	case rt.Compact:
		method, path, body = http.MethodPost, api.PathCompact, string(rt.MustJSON(api.CompactRequest{Revision: op.Revision}))
	case rt.MemberList, rt.MemberRemove, rt.Snapshot: // the agent's routes (cmd), not kv.Server's
		return rt.NotServed
	case rt.HashKV: // etcd's alone
		return rt.NotServed
	default:
		t.Fatalf("http door: op %d unknown", op.Kind)
	}
	code, b := d.f.HTTPDo(t, secret, method, path, body)
	if code < 400 && op.Kind == rt.Range {
		return rt.ListAnswer(b)
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

// TestHTTPRulesTable: the rules table (key limits and UTF-8, the value limit, the
// reserved prefix, duplicate keys) over the HTTP routes, with every right.
func TestHTTPRulesTable(t *testing.T) {
	f := rt.New(t)
	rt.RunRuleCases(t, f, httpDoor{f})
}
