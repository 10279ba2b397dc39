package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// The rights table: every client operation keel serves, the right it needs, and the
// answer a token lacking that right gets, whatever door carries it. The cases are
// described without a door (doorOp); each door (stream, HTTP, later etcd's gRPC)
// translates them into its own requests (door.do). A door that adds an operation adds
// a case here, and every door must then refuse it.

// rightNeeded is the right an operation needs.
type rightNeeded string

const (
	needRead  rightNeeded = "read on the key"
	needWrite rightNeeded = "write on the key"
	needLease rightNeeded = "write on some key prefix (leases)"
)

// opKind is a client operation, whatever door carries it.
type opKind uint8

const (
	opGet            opKind = iota + 1
	opRange                 // read every key with the prefix key (stream: a txn's ranged get; HTTP: a list)
	opPut                   // put key; with lease, attached to the fixture's lease
	opDelete                // delete key
	opDeleteRange           // delete every key with the prefix key
	opWatch                 // watch key, or the prefix key with prefix
	opTxn                   // run txn
	opLeaseGrant            // grant a new lease
	opLeaseKeepAlive        // renew the fixture's lease
	opLeaseRevoke           // revoke the fixture's lease
)

// doorOp is one operation, described independently of the door.
type doorOp struct {
	kind         opKind
	key          string
	serializable bool  // get
	revision     int64 // get: 0 = latest
	prefix       bool  // watch
	lease        bool  // put: attach to the fixture's lease
	txn          api.TxnRequest
}

// rightCase is one row of the table: op needs right.
type rightCase struct {
	name  string
	right rightNeeded
	op    doorOp
}

// rightsKey is the key the cases touch; rightsOther is a prefix every lacking token
// may write, so that a token lacking one right holds all the others it can.
const (
	rightsKey   = "app/x"
	rightsOther = "other/"
)

var rightCases = []rightCase{
	{"get", needRead, doorOp{kind: opGet, key: rightsKey}},
	{"get serializable", needRead, doorOp{kind: opGet, key: rightsKey, serializable: true}},
	{"get at a revision", needRead, doorOp{kind: opGet, key: rightsKey, revision: 1}},
	{"range", needRead, doorOp{kind: opRange, key: "app/"}},
	{"put", needWrite, doorOp{kind: opPut, key: rightsKey}},
	{"put with lease", needWrite, doorOp{kind: opPut, key: rightsKey, lease: true}},
	{"delete", needWrite, doorOp{kind: opDelete, key: rightsKey}},
	{"delete range", needWrite, doorOp{kind: opDeleteRange, key: "app/"}},
	{"watch key", needRead, doorOp{kind: opWatch, key: rightsKey}},
	{"watch prefix", needRead, doorOp{kind: opWatch, key: "app/", prefix: true}},
	{"txn compare", needRead, doorOp{kind: opTxn, txn: api.TxnRequest{
		Compare: []api.Compare{{Key: rightsKey, Target: api.TargetVersion, Result: api.ResultGreater, Int: 0}},
		Success: []api.Op{{Type: api.OpPut, Key: rightsOther + "t", Value: []byte("v")}}}}},
	{"txn get", needRead, doorOp{kind: opTxn, txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpGet, Key: rightsKey}}}}},
	{"txn ranged get", needRead, doorOp{kind: opTxn, txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpGet, Key: "app/", Prefix: true}}}}},
	{"txn put", needWrite, doorOp{kind: opTxn, txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpPut, Key: rightsKey, Value: []byte("v")}}}}},
	{"txn delete in the failure branch", needWrite, doorOp{kind: opTxn, txn: api.TxnRequest{
		Compare: []api.Compare{{Key: rightsOther + "t", Target: api.TargetVersion, Result: api.ResultEqual, Int: 0}},
		Failure: []api.Op{{Type: api.OpDelete, Key: rightsKey}}}}},
	{"txn delete range", needWrite, doorOp{kind: opTxn, txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpDeleteRange, Key: "app/", Prefix: true}}}}},
	{"lease grant", needLease, doorOp{kind: opLeaseGrant}},
	{"lease keepalive", needLease, doorOp{kind: opLeaseKeepAlive}},
	{"lease revoke", needLease, doorOp{kind: opLeaseRevoke}},
}

// doorAnswer is how a door answered an operation: the error's code, reason and
// message, or code 0 when the operation was not refused.
type doorAnswer struct {
	code        int
	reason, msg string
}

// door carries the table's operations. secret "" sends no token.
type door interface {
	do(t *testing.T, secret string, op doorOp) doorAnswer
}

// rightsFixture is a server with ACLs bootstrapped, the key rightsKey, a lease, and
// for each right a token that lacks it but holds every other right it can.
type rightsFixture struct {
	srv     *Server
	store   *kvtest.LeadingStore
	addr    string
	mgmt    string // the bootstrap token: every right
	lease   int64
	lacking map[rightNeeded]string
}

// rightsPolicies: for each right, a policy without it.
var rightsPolicies = map[rightNeeded]api.ACLPolicy{
	// write (so read) on other/ only, every operator right: app/ unreadable.
	needRead: {Name: "no-read", Keys: []api.ACLKeyRule{{Prefix: rightsOther, Access: api.AccessWrite}},
		Operator: []string{api.RightAll}},
	// read everything, write other/: app/ not writable, leases allowed.
	needWrite: {Name: "no-write", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead},
		{Prefix: rightsOther, Access: api.AccessWrite}}, Operator: []string{api.RightAll}},
	// read everything, write no key: no leases.
	needLease: {Name: "no-lease", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead}},
		Resources: []api.ACLResourceRule{{Group: "*", Resource: "*", Access: api.AccessWrite}},
		Operator:  []string{api.RightAll}},
}

// newRightsFixture serves a server over a leading store through Serve (the ACL state
// follows the records as on a node) and sets up the fixture over HTTP.
func newRightsFixture(t *testing.T) *rightsFixture {
	t.Helper()
	st := kvtest.NewLeading()
	srv, addr := serveOn(t, DefaultConfig(), st)
	f := &rightsFixture{srv: srv, store: st, addr: addr, lacking: map[rightNeeded]string{}}
	var boot api.ACLToken
	f.mustHTTP(t, "", http.MethodPost, api.PathACLBootstrap, "", &boot)
	f.mgmt = boot.SecretID
	for right, p := range rightsPolicies {
		f.mustHTTP(t, f.mgmt, http.MethodPut, api.PathACLPolicies+"/"+p.Name, string(mustJSON(p)), nil)
		f.lacking[right] = f.newToken(t, p.Name).SecretID
	}
	f.mustHTTP(t, f.mgmt, http.MethodPut, api.PathKV+rightsKey, "v0", nil)
	var lease api.LeaseGrantResponse
	f.mustHTTP(t, f.mgmt, http.MethodPost, api.PathLeases, `{"ttl":600}`, &lease)
	f.lease = lease.ID
	// The lessor leads from its first poll on: until then a keepalive is 503.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, b := f.httpDo(t, f.mgmt, http.MethodPost, fmt.Sprintf("%s/%d/keepalive", api.PathLeases, f.lease), "")
		if code == http.StatusOK {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease keepalive still %d %s after 10s", code, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *rightsFixture) newToken(t *testing.T, policies ...string) api.ACLToken {
	t.Helper()
	var tok api.ACLToken
	f.mustHTTP(t, f.mgmt, http.MethodPost, api.PathACLTokens, string(mustJSON(api.ACLTokenRequest{Policies: policies})), &tok)
	return tok
}

// httpDo sends one request with the bearer secret ("" = none) and returns the status
// and body; a watch answers with its status alone (its body does not end).
func (f *rightsFixture) httpDo(t *testing.T, secret, method, path, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+f.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		return resp.StatusCode, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// mustHTTP sends a request that must answer 200 and decodes its body into out.
func (f *rightsFixture) mustHTTP(t *testing.T, secret, method, path, body string, out any) {
	t.Helper()
	code, b := f.httpDo(t, secret, method, path, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s = %d %s", method, path, code, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// deleteToken deletes tok and waits until the server has stopped accepting it.
func (f *rightsFixture) deleteToken(t *testing.T, tok api.ACLToken) {
	t.Helper()
	f.mustHTTP(t, f.mgmt, http.MethodDelete, api.PathACLTokens+"/"+tok.AccessorID, "", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := f.httpDo(t, tok.SecretID, http.MethodGet, api.PathACLTokenSelf, "")
		if code == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted token still answered %d after 10s", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runRightCases runs every case through d: with the token that lacks its right it is
// 403 Forbidden naming the right and changes nothing; with every right it is not
// refused (whatever else it answers).
func runRightCases(t *testing.T, f *rightsFixture, d door) {
	t.Helper()
	before := f.store.FSM().Revision()
	for _, c := range rightCases {
		a := d.do(t, f.lacking[c.right], c.op)
		if a.code != http.StatusForbidden || a.reason != api.ReasonForbidden || !strings.Contains(a.msg, "right") {
			t.Errorf("%s without %s: %d %s %q; want 403 Forbidden naming the right", c.name, c.right, a.code, a.reason, a.msg)
		}
	}
	if after := f.store.FSM().Revision(); after != before {
		t.Errorf("refused operations moved the revision %d → %d", before, after)
	}
	if _, ok := f.store.FSM().View().Lease(f.lease); !ok {
		t.Errorf("lease %d is gone after refused operations", f.lease)
	}
	for _, c := range rightCases {
		if a := d.do(t, f.mgmt, c.op); a.code == http.StatusForbidden || a.code == http.StatusUnauthorized {
			t.Errorf("%s with every right: %d %s %q; want it not refused", c.name, a.code, a.reason, a.msg)
		}
	}
}

// runUnauthorizedCases runs every case through d with secret, a token that is not
// (or no longer) valid: each is 401 and changes nothing.
func runUnauthorizedCases(t *testing.T, f *rightsFixture, d door, secret, what string) {
	t.Helper()
	before := f.store.FSM().Revision()
	for _, c := range rightCases {
		if a := d.do(t, secret, c.op); a.code != http.StatusUnauthorized || a.reason != api.ReasonUnauthorized {
			t.Errorf("%s with %s: %d %s %q; want 401 Unauthorized", c.name, what, a.code, a.reason, a.msg)
		}
	}
	if after := f.store.FSM().Revision(); after != before {
		t.Errorf("unauthorized operations moved the revision %d → %d", before, after)
	}
}

// httpDoor carries the cases over the HTTP routes.
type httpDoor struct{ f *rightsFixture }

func (d httpDoor) do(t *testing.T, secret string, op doorOp) doorAnswer {
	t.Helper()
	method, path, body := http.MethodGet, api.PathKV+op.key, ""
	switch op.kind {
	case opGet:
		q := []string{}
		if op.serializable {
			q = append(q, "consistency=serializable")
		}
		if op.revision > 0 {
			q = append(q, fmt.Sprintf("revision=%d", op.revision))
		}
		if len(q) > 0 {
			path += "?" + strings.Join(q, "&")
		}
	case opRange:
		path += "?list=true"
	case opPut:
		method, body = http.MethodPut, "v"
		if op.lease {
			path += fmt.Sprintf("?lease=%d", d.f.lease)
		}
	case opDelete:
		method = http.MethodDelete
	case opDeleteRange:
		method, path = http.MethodDelete, path+"?prefix=true"
	case opWatch:
		path = api.PathWatch + op.key
		if op.prefix {
			path += "?prefix=true"
		}
	case opTxn:
		method, path, body = http.MethodPost, api.PathTxn, string(mustJSON(op.txn))
	case opLeaseGrant:
		method, path, body = http.MethodPost, api.PathLeases, `{"ttl":600}`
	case opLeaseKeepAlive:
		method, path = http.MethodPost, fmt.Sprintf("%s/%d/keepalive", api.PathLeases, d.f.lease)
	case opLeaseRevoke:
		method, path = http.MethodDelete, fmt.Sprintf("%s/%d", api.PathLeases, d.f.lease)
	default:
		t.Fatalf("http door: op %d unknown", op.kind)
	}
	code, b := d.f.httpDo(t, secret, method, path, body)
	if code < 400 {
		return doorAnswer{}
	}
	var e api.Error
	json.Unmarshal(bytes.TrimSpace(b), &e)
	return doorAnswer{code: code, reason: e.Reason, msg: e.Message}
}

// TestHTTPRightsTable: the rights table over the HTTP routes — the same cases as the
// stream's, refused 403 without their right, 401 without a token or with a deleted
// one.
func TestHTTPRightsTable(t *testing.T) {
	f := newRightsFixture(t)
	d := httpDoor{f}
	runRightCases(t, f, d)
	runUnauthorizedCases(t, f, d, "", "no token")
	gone := f.newToken(t, rightsPolicies[needRead].Name)
	f.deleteToken(t, gone)
	runUnauthorizedCases(t, f, d, gone.SecretID, "a deleted token")
}
