package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/kv/httpapi"
)

// aclAgent starts one real node (raft over TCP, HTTP, the widgets schema) with
// -acl-default deny and waits until it serves.
func aclAgent(t *testing.T) *Agent {
	t.Helper()
	cfg := withSchema(testConfig(t, t.TempDir(), "n1"), loadTestSchema(t, "widgets-v1v2.yaml"))
	cfg.Raft.Bootstrap = true
	cfg.KV.ACLDefault = kv.ACLDeny
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Close(ctx)
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, _, _ := aclDo(t, a, "GET", api.PathReady, "", "")
		if st == http.StatusOK {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not ready after 20s: /readyz %d", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// aclDo sends one request with the given bearer secret ("" = none) and returns the
// status and the error reason and message (for JSON errors).
func aclDo(t *testing.T, a *Agent, method, path, body, secret string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+a.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if path == api.PathStream {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", api.StreamProtocol)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") || resp.StatusCode == http.StatusSwitchingProtocols {
		return resp.StatusCode, "", "" // a watch or an upgraded stream: do not wait for its end
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e api.Error
	json.Unmarshal(b, &e)
	return resp.StatusCode, e.Reason, e.Message
}

func aclClient(t *testing.T, a *Agent, secret string) *client.Client {
	t.Helper()
	c, err := client.New([]string{a.HTTPAddr()}, client.Options{Token: secret, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tokens of the route table, in column order.
const (
	colNone = iota
	colBad
	colReadOther // read-only on other/
	colWriter    // write on app/, write on apps/widgets
	colOperator  // every operator right, no key or resource right
	nCols
)

// Expected outcome of a request: refused with 401, refused with 403 Forbidden, or let
// through to the handler (whatever it answers: 200, 400, 404, 405 ...).
type outcome uint8

const (
	o401 outcome = iota + 1
	o403
	oPass
)

func (o outcome) String() string {
	return map[outcome]string{o401: "401", o403: "403 Forbidden", oPass: "passed to the handler"}[o]
}

func row(o ...outcome) [nCols]outcome { return [nCols]outcome(o) }

var (
	open     = row(oPass, oPass, oPass, oPass, oPass)
	keysApp  = row(o401, o401, o403, oPass, o403) // a key under app/
	operator = row(o401, o401, o403, o403, oPass)
	anyToken = row(o401, o401, oPass, oPass, oPass)
	writer   = row(o401, o401, o403, oPass, o403) // widgets write, leases
	reader   = row(o401, o401, o403, oPass, o403) // widgets read (writer only holds it)

	// status: its public view without a token, the whole status with any valid one;
	// a bad token is told so (kv.Server.StatusFor).
	status = row(oPass, o401, oPass, oPass, oPass)
)

// aclRoute is one request per route pattern of the node's mux.
type aclRoute struct {
	method, path, body string
	want               [nCols]outcome
}

// aclRoutes has one request for every registered pattern (TestACLRouteTable fails for
// a pattern missing here, so a new route cannot ship without an access rule and a
// row). Requests that pass are chosen to change nothing lasting (bad bodies, unknown
// IDs), except the last: leave.
var aclRoutes = map[string]aclRoute{
	"GET /healthz":           {"GET", "/healthz", "", open},
	"GET /readyz":            {"GET", "/readyz", "", open},
	"GET /livez":             {"GET", "/livez", "", open},
	"GET /v1/status":         {"GET", "/v1/status", "", status},
	"POST /v1/acl/bootstrap": {"POST", "/v1/acl/bootstrap", "", open}, // 409 for everyone: already done
	"/":                      {"GET", "/no/such/route", "", open},

	"GET /v1/kv/{key...}":    {"GET", "/v1/kv/app/x", "", keysApp},
	"PUT /v1/kv/{key...}":    {"PUT", "/v1/kv/app/x", "v", keysApp},
	"DELETE /v1/kv/{key...}": {"DELETE", "/v1/kv/app/nothing", "", keysApp},
	"GET /v1/watch/{key...}": {"GET", "/v1/watch/app/x", "", keysApp},
	"GET /v1/stream":         {"GET", "/v1/stream", "", anyToken}, // keys are checked per request on the stream
	"POST /v1/txn":           {"POST", "/v1/txn", `{"success":[{"type":"put","key":"app/t","value":"dg=="}]}`, keysApp},
	"POST /v1/compact":       {"POST", "/v1/compact", `{"revision":0}`, operator},

	"POST /v1/leases":                {"POST", "/v1/leases", `{"ttl":0}`, writer},
	"GET /v1/leases":                 {"GET", "/v1/leases", "", writer},
	"GET /v1/leases/{id}":            {"GET", "/v1/leases/12345", "", writer},
	"DELETE /v1/leases/{id}":         {"DELETE", "/v1/leases/12345", "", writer},
	"POST /v1/leases/{id}/keepalive": {"POST", "/v1/leases/12345/keepalive", "", writer},

	"GET /apis":                                        {"GET", "/apis", "", anyToken},
	"GET /apis/{group}/{version}/{resource}":           {"GET", "/apis/apps/v2/widgets", "", reader},
	"GET /apis/{group}/{version}/{resource}/{name}":    {"GET", "/apis/apps/v2/widgets/w1", "", reader},
	"PUT /apis/{group}/{version}/{resource}/{name}":    {"PUT", "/apis/apps/v2/widgets/w1", "{", writer},
	"DELETE /apis/{group}/{version}/{resource}/{name}": {"DELETE", "/apis/apps/v2/widgets/none", "", writer},

	"GET /metrics":                             {"GET", "/metrics", "", anyToken},
	"GET /v1/versions":                         {"GET", "/v1/versions", "", operator},
	"GET /v1/agent/members":                    {"GET", "/v1/agent/members", "", operator},
	"DELETE /v1/agent/peers/{id}":              {"DELETE", "/v1/agent/peers/nobody", "", operator},
	"POST /v1/agent/transfer-leader":           {"POST", "/v1/agent/transfer-leader", `{"id":"nobody"}`, operator},
	"GET /v1/agent/snapshot":                   {"GET", "/v1/agent/snapshot", "", operator},
	"POST /v1/agent/snapshot":                  {"POST", "/v1/agent/snapshot", "not a snapshot", operator},
	"PUT /v1/agent/schema":                     {"PUT", "/v1/agent/schema", "resources: [", operator},
	"GET /v1/migrations":                       {"GET", "/v1/migrations", "", operator},
	"POST /v1/migrations":                      {"POST", "/v1/migrations", "{", operator},
	"DELETE /v1/migrations/{group}/{resource}": {"DELETE", "/v1/migrations/none/none", "", operator},
	"GET /v1/migrations/settings":              {"GET", "/v1/migrations/settings", "", operator},
	"PUT /v1/migrations/settings":              {"PUT", "/v1/migrations/settings", "{", operator},
	"GET /v1/keymigrations":                    {"GET", "/v1/keymigrations", "", operator},
	"GET /v1/keymigrations/{name}":             {"GET", "/v1/keymigrations/none", "", operator},
	"POST /v1/keymigrations/{name}/advance":    {"POST", "/v1/keymigrations/none/advance", "{}", operator},
	"POST /v1/keymigrations/{name}/rollback":   {"POST", "/v1/keymigrations/none/rollback", `{"to":0}`, operator},
	"GET /v1/acl/tokens":                       {"GET", "/v1/acl/tokens", "", operator},
	"POST /v1/acl/tokens":                      {"POST", "/v1/acl/tokens", `{"policies":[]}`, operator},
	"DELETE /v1/acl/tokens/{accessor}":         {"DELETE", "/v1/acl/tokens/nobody", "", operator},
	"GET /v1/acl/token/self":                   {"GET", "/v1/acl/token/self", "", anyToken},
	"GET /v1/acl/policies":                     {"GET", "/v1/acl/policies", "", operator},
	"GET /v1/acl/policies/{name}":              {"GET", "/v1/acl/policies/nothing", "", operator},
	"PUT /v1/acl/policies/{name}":              {"PUT", "/v1/acl/policies/bad", `{"keys":[{"prefix":"x","access":"all"}]}`, operator},
	"DELETE /v1/acl/policies/{name}":           {"DELETE", "/v1/acl/policies/nothing", "", operator},
	"POST /v1/agent/leave":                     {"POST", "/v1/agent/leave", "", operator}, // run last
}

// TestACLRouteTable sends one request per route of a real node's mux with each of five
// tokens and checks that it is refused (401, 403 Forbidden naming a right) or let
// through as the table says. Every registered pattern must have a row and an access
// rule; the method-less patterns (405 fallbacks) must answer 405 to anyone.
func TestACLRouteTable(t *testing.T) {
	a := aclAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Before bootstrap a deny node answers only the open routes.
	if st, reason, _ := aclDo(t, a, "GET", "/v1/kv/app/x", "", ""); st != 401 || reason != api.ReasonUnauthorized {
		t.Fatalf("before bootstrap: GET key = %d %s, want 401 Unauthorized", st, reason)
	}
	if st, _, _ := aclDo(t, a, "GET", api.PathStatus, "", ""); st != 200 {
		t.Fatalf("before bootstrap: status = %d, want 200", st)
	}
	if st, err := aclClient(t, a, "").Status(ctx); err != nil || st.ACL == nil || st.ACL.Bootstrapped || st.ACL.Default != "deny" {
		t.Fatalf("status before bootstrap: acl %+v, %v; want deny, not bootstrapped", st.ACL, err)
	}
	boot, err := aclClient(t, a, "").ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := aclClient(t, a, boot.SecretID)
	if st, err := aclClient(t, a, "").Status(ctx); err != nil || !st.ACL.Bootstrapped {
		t.Fatalf("status after bootstrap: acl %+v, %v; want bootstrapped", st.ACL, err)
	}
	for _, p := range []api.ACLPolicy{
		{Name: "read-other", Keys: []api.ACLKeyRule{{Prefix: "other/", Access: api.AccessRead}}},
		{Name: "writer", Keys: []api.ACLKeyRule{{Prefix: "app/", Access: api.AccessWrite}},
			Resources: []api.ACLResourceRule{{Group: "apps", Resource: "widgets", Access: api.AccessWrite}}},
		{Name: "operator", Operator: []string{api.RightAll}},
	} {
		if _, err := mgmt.ACLPolicyPut(ctx, p); err != nil {
			t.Fatalf("policy %s: %v", p.Name, err)
		}
	}
	secrets := [nCols]string{colNone: "", colBad: "keel_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}
	for col, pol := range map[int]string{colReadOther: "read-other", colWriter: "writer", colOperator: "operator"} {
		tok, err := mgmt.ACLTokenCreate(ctx, api.ACLTokenRequest{Policies: []string{pol}})
		if err != nil {
			t.Fatal(err)
		}
		secrets[col] = tok.SecretID
	}

	routes := a.httpd.Routes()
	var last string
	for _, pattern := range routes {
		r, ok := aclRoutes[pattern]
		if !strings.Contains(pattern, " ") && pattern != "/" {
			// a 405 fallback: borrow the path of a method of the same pattern
			for p, mr := range aclRoutes {
				if _, rest, _ := strings.Cut(p, " "); rest == pattern {
					r, ok = aclRoute{"PATCH", mr.path, "", open}, true
					break
				}
			}
		} else if !httpapi.RouteHasRule(pattern) && pattern != "/" {
			t.Errorf("route %q has no access rule", pattern)
		}
		if !ok {
			t.Errorf("route %q has no row in aclRoutes: add one", pattern)
			continue
		}
		if pattern == "POST "+api.PathAgentLeave {
			last = pattern
			continue
		}
		checkACLRow(t, a, pattern, r, secrets)
	}
	if last == "" {
		t.Fatalf("leave route not registered")
	}
	checkACLRow(t, a, last, aclRoutes[last], secrets)
	if len(routes) < 50 {
		t.Errorf("only %d routes walked", len(routes))
	}
}

func checkACLRow(t *testing.T, a *Agent, pattern string, r aclRoute, secrets [nCols]string) {
	t.Helper()
	names := [nCols]string{"no token", "bad token", "read other/", "writer", "operator"}
	for col := range nCols {
		st, reason, msg := aclDo(t, a, r.method, r.path, r.body, secrets[col])
		got := oPass
		switch {
		case st == http.StatusUnauthorized:
			got = o401
		case st == http.StatusForbidden && reason == api.ReasonForbidden:
			got = o403
			if !strings.Contains(msg, "right") {
				t.Errorf("%s with %s: 403 message %q names no right", pattern, names[col], msg)
			}
		}
		if got != r.want[col] {
			t.Errorf("%s (%s %s) with %s: %d %s %q, want %v", pattern, r.method, r.path, names[col], st, reason, msg, r.want[col])
		}
		if secrets[col] != "" && strings.Contains(msg, secrets[col]) {
			t.Errorf("%s: the error message holds the token", pattern)
		}
	}
}

// aclBootstrapWith bootstraps a's ACLs, puts policy p, and returns a client with the
// bootstrap token and a token holding p alone.
func aclBootstrapWith(ctx context.Context, t *testing.T, a *Agent, p api.ACLPolicy) (*client.Client, api.ACLToken) {
	t.Helper()
	boot, err := aclClient(t, a, "").ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := aclClient(t, a, boot.SecretID)
	if _, err := mgmt.ACLPolicyPut(ctx, p); err != nil {
		t.Fatal(err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx, api.ACLTokenRequest{Policies: []string{p.Name}})
	if err != nil {
		t.Fatal(err)
	}
	return mgmt, tok
}

// TestACLListAndWatchFiltering: a token that may read a/ only lists and watches the
// whole keyspace and sees a/ keys alone — events of one revision that also wrote b/
// arrive without the b/ ones — and is refused b/ outright.
func TestACLListAndWatchFiltering(t *testing.T) {
	a := aclAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mgmt, tok := aclBootstrapWith(ctx, t, a, api.ACLPolicy{Name: "a-reader", Keys: []api.ACLKeyRule{{Prefix: "a/", Access: api.AccessRead}}})
	rd := aclClient(t, a, tok.SecretID)
	mixed := func(n string) int64 {
		t.Helper()
		resp, err := mgmt.Txn(ctx, &api.TxnRequest{Success: []api.Op{
			{Type: "put", Key: "a/" + n, Value: []byte(n)}, {Type: "put", Key: "b/" + n, Value: []byte(n)}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Revision
	}
	first := mixed("1")
	mixed("2")

	list, err := rd.List(ctx, "", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range list.Items {
		keys = append(keys, kv.Key)
	}
	if strings.Join(keys, ",") != "a/1,a/2" {
		t.Fatalf("list of everything with a-reader = %q, want only a/1,a/2", keys)
	}
	if _, err := rd.List(ctx, "b/", client.ListOptions{}); !client.IsForbidden(err) {
		t.Fatalf("list b/ with a-reader = %v, want 403 Forbidden", err)
	}
	if _, err := rd.Get(ctx, "b/1"); !client.IsForbidden(err) {
		t.Fatalf("get b/1 with a-reader = %v, want 403 Forbidden", err)
	}

	// The same watch over HTTP and over the stream protocol (many watches on one
	// connection, the token given at its upgrade).
	rdStream, err := client.New([]string{a.HTTPAddr()}, client.Options{Token: tok.SecretID, MaxRetries: -1, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rdStream.Close()
	for i, cl := range []*client.Client{rd, rdStream} {
		wctx, wcancel := context.WithCancel(ctx)
		events := cl.Watch(wctx, "", client.WatchOptions{StartRevision: first, Progress: 200 * time.Millisecond})
		last := fmt.Sprint(3 + i)
		mixed(last)
		var got []string
		for ev := range events {
			if ev.Err != nil {
				t.Fatalf("watch %d: %v", i, ev.Err)
			}
			if ev.Type == api.EventProgress {
				continue
			}
			got = append(got, ev.KV.Key)
			if ev.KV.Key == "a/"+last {
				break
			}
		}
		want := "a/1,a/2,a/3"
		if i == 1 {
			want += ",a/4"
		}
		if strings.Join(got, ",") != want {
			t.Fatalf("watch %d of everything with a-reader delivered %q, want %s", i, got, want)
		}
		wcancel()
	}
	if _, err := rdStream.Get(ctx, "b/1"); !client.IsForbidden(err) {
		t.Fatalf("stream get b/1 with a-reader = %v, want 403 Forbidden", err)
	}
	// Transactions on the stream are checked key by key, as over HTTP.
	if _, err := rdStream.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpGet, Key: "b/1"}}}); !client.IsForbidden(err) {
		t.Fatalf("stream txn get b/1 with a-reader = %v, want 403 Forbidden", err)
	}
	if _, err := rdStream.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpPut, Key: "a/x"}}}); !client.IsForbidden(err) {
		t.Fatalf("stream txn put a/x with a-reader = %v, want 403 Forbidden", err)
	}
	if r, err := rdStream.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpGet, Key: "a/1"}}}); err != nil ||
		len(r.Responses) != 1 || len(r.Responses[0].KVs) != 1 {
		t.Fatalf("stream txn get a/1 with a-reader = %+v, %v", r, err)
	}
	// Leases are for writers, on the stream as over HTTP.
	if _, err := rdStream.Grant(ctx, 10*time.Second); !client.IsForbidden(err) {
		t.Fatalf("stream lease grant with a-reader = %v, want 403 Forbidden", err)
	}
	if _, err := rd.Grant(ctx, 10*time.Second); !client.IsForbidden(err) {
		t.Fatalf("lease grant with a-reader = %v, want 403 Forbidden", err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	if ev, ok := <-rdStream.Watch(sctx, "b/", client.WatchOptions{}); !ok || !client.IsForbidden(ev.Err) {
		t.Fatalf("stream watch of b/ with a-reader = %+v (open %t), want 403 Forbidden", ev, ok)
	}
	scancel()
	if st, _, _ := aclDo(t, a, "GET", "/v1/watch/b/1", "", tok.SecretID); st != http.StatusForbidden {
		t.Fatalf("watch b/1 with a-reader = %d, want 403", st)
	}
}

// TestACLTokenLifecycle: a token works over HTTP and the stream protocol within its
// policy; deleting its policy takes the rights away (403), deleting the token makes it
// unknown (401); the ACL records themselves are not readable without the acl right.
func TestACLTokenLifecycle(t *testing.T) {
	a := aclAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	boot, err := aclClient(t, a, "").ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := aclClient(t, a, boot.SecretID)
	if _, err := mgmt.ACLPolicyPut(ctx, api.ACLPolicy{Name: "app", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead}, {Prefix: "app/", Access: api.AccessWrite}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx, api.ACLTokenRequest{Policies: []string{"app"}, Description: "app server"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := client.New([]string{a.HTTPAddr()}, client.Options{Token: tok.SecretID, Stream: true, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Put(ctx, "app/x", []byte("1")); err != nil {
		t.Fatalf("stream put within the policy: %v", err)
	}
	if _, err := st.Put(ctx, "other/x", []byte("1")); !client.IsForbidden(err) {
		t.Fatalf("stream put outside the policy = %v, want 403 Forbidden", err)
	}
	if g, err := st.Get(ctx, "app/x"); err != nil || string(g.KV.Value) != "1" {
		t.Fatalf("stream get = %v, %v", g, err)
	}
	// keel's ACL records: a read right on "" does not reach them.
	list, err := st.List(ctx, "", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range list.Items {
		if strings.Contains(kv.Key, "acl/") {
			t.Fatalf("list with a read-all token shows the ACL record %q", kv.Key)
		}
	}
	self, err := st.ACLTokenSelf(ctx)
	if err != nil || self.AccessorID != tok.AccessorID || self.SecretID != "" {
		t.Fatalf("token self = %+v, %v; want accessor %s and no secret", self, err, tok.AccessorID)
	}
	toks, err := mgmt.ACLTokenList(ctx)
	if err != nil || len(toks) != 2 {
		t.Fatalf("token list = %+v, %v; want 2 tokens", toks, err)
	}
	for _, tk := range toks {
		if tk.SecretID != "" {
			t.Fatalf("token list shows a secret")
		}
	}

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wrev, err := mgmt.Put(ctx, "app/w", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	events := aclClient(t, a, tok.SecretID).Watch(wctx, "app/", client.WatchOptions{StartRevision: wrev, Progress: 100 * time.Millisecond})
	for ev := range events { // the watch is up and delivering
		if ev.Err != nil {
			t.Fatalf("watch before the token is deleted: %v", ev.Err)
		}
		if ev.Type == api.EventPut {
			break
		}
	}
	if err := mgmt.ACLPolicyDelete(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "app/x", []byte("2")); !client.IsForbidden(err) {
		t.Fatalf("put after its policy was deleted = %v, want 403", err)
	}
	if err := mgmt.ACLTokenDelete(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	var end error
	for ev := range events {
		if ev.Err != nil {
			end = ev.Err
			break
		}
	}
	if !client.IsUnauthorized(end) {
		t.Fatalf("watch after its token was deleted ended with %v, want 401", end)
	}
	plain := aclClient(t, a, tok.SecretID)
	if _, err := plain.Get(ctx, "app/x"); !client.IsUnauthorized(err) {
		t.Fatalf("get with a deleted token = %v, want 401", err)
	}
	if err := mgmt.ACLPolicyDelete(ctx, api.ManagementPolicy); !client.IsBadRequest(err) {
		t.Fatalf("deleting the management policy = %v, want 400", err)
	}
	if g, err := mgmt.Get(ctx, "app/x"); err != nil || string(g.KV.Value) != "1" {
		t.Fatalf("app/x = %v, %v; want 1 (refused writes changed nothing)", g, err)
	}
}

// TestACLBootstrapOnceAcrossCluster: three nodes bootstrap at the same moment; exactly
// one gets the management token, the others 409, and the token works on every node at
// once (a node that has not applied it yet asks the leader).
func TestACLBootstrapOnceAcrossCluster(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type res struct {
		tok api.ACLToken
		err error
	}
	out := make(chan res, 3)
	for i := range 3 {
		go func() {
			tok, err := c.client(i).ACLBootstrap(ctx)
			out <- res{tok, err}
		}()
	}
	var secret string
	for range 3 {
		r := <-out
		switch {
		case r.err == nil:
			if secret != "" {
				t.Fatalf("two bootstraps succeeded")
			}
			secret = r.tok.SecretID
		case !client.IsAlreadyBootstrapped(r.err):
			t.Fatalf("bootstrap: %v, want success or 409 AlreadyBootstrapped", r.err)
		}
	}
	if secret == "" {
		t.Fatalf("no bootstrap succeeded")
	}
	for i := range 3 {
		cl, err := client.New([]string{c.agents[i].HTTPAddr()}, client.Options{Token: secret})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Put(ctx, "k", []byte("v")); err != nil {
			t.Fatalf("node %d: put with the management token: %v", i, err)
		}
		if _, err := c.client(i).Get(ctx, "k"); !client.IsUnauthorized(err) {
			t.Fatalf("node %d: get without a token after bootstrap = %v, want 401", i, err)
		}
	}
}

// TestACLRestartedNodeEnforcesAtOnce: a node restarted in a bootstrapped cluster of
// -acl-default allow nodes starts with an empty store; until it has caught up it must
// not take its empty state for "not bootstrapped" and serve tokenless requests, nor
// refuse the management token. Every answer from the first moment is 401 (or a
// retriable 503/504) without a token, and never 401 with it.
func TestACLRestartedNodeEnforcesAtOnce(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	boot, err := c.client(0).ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := aclClient(t, c.agents[0], boot.SecretID)
	if _, err := mgmt.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	victim := (c.leader() + 1) % 3
	c.restart(victim)
	a := c.agents[victim]
	sawToken, sawNoToken := false, false
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		st, reason, msg := aclDo(t, a, "GET", "/v1/kv/k?consistency=serializable", "", "")
		switch st {
		case http.StatusUnauthorized:
			sawNoToken = true
		case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		default:
			t.Fatalf("restarted node, no token: %d %s %q; want 401 (or a retriable 503/504)", st, reason, msg)
		}
		st, reason, msg = aclDo(t, a, "GET", "/v1/kv/k?consistency=serializable", "", boot.SecretID)
		switch st {
		case http.StatusOK, http.StatusNotFound:
			sawToken = sawToken || st == http.StatusOK
		case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		default:
			t.Fatalf("restarted node, management token: %d %s %q; want 200 (or a retriable 503/504)", st, reason, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawToken || !sawNoToken {
		t.Fatalf("restarted node never served: with token %v, refused without %v", sawToken, sawNoToken)
	}
}

// TestACLTypedWatchFollowsPolicy: a typed watch runs on the rights its token holds at
// each write, not those it had when it started: taking the resource's read right out
// of the token's policy ends it with an ERROR event of code 403, deleting the token
// with one of code 401.
func TestACLTypedWatchFollowsPolicy(t *testing.T) {
	a := aclAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reader := api.ACLPolicy{Name: "widget-reader",
		Resources: []api.ACLResourceRule{{Group: "apps", Resource: "widgets", Access: api.AccessRead}}}
	mgmt, tok := aclBootstrapWith(ctx, t, a, reader)
	// watch opens the typed watch with tok and returns its next event's type and code.
	watch := func() func() (string, float64) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
			"http://"+a.HTTPAddr()+"/apis/apps/v1/widgets?watch=true&allowWatchBookmarks=true&progress=100ms", nil)
		req.Header.Set("Authorization", "Bearer "+tok.SecretID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("typed watch with widget-reader: %d", resp.StatusCode)
		}
		sc := bufio.NewScanner(resp.Body)
		return func() (string, float64) {
			t.Helper()
			if !sc.Scan() {
				t.Fatalf("typed watch ended without an event: %v", sc.Err())
			}
			var ev struct {
				Type   string `json:"type"`
				Object struct {
					Code float64 `json:"code"`
				} `json:"object"`
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatal(err)
			}
			return ev.Type, ev.Object.Code
		}
	}
	// until reads events until one that is not a bookmark.
	until := func(next func() (string, float64)) (string, float64) {
		for {
			if typ, code := next(); typ != "BOOKMARK" {
				return typ, code
			}
		}
	}
	next := watch()
	if typ, _ := next(); typ != "BOOKMARK" {
		t.Fatalf("first event of an idle watch: %s, want BOOKMARK", typ)
	}
	if _, err := mgmt.ACLPolicyPut(ctx, api.ACLPolicy{Name: reader.Name,
		Keys: []api.ACLKeyRule{{Prefix: "other/", Access: api.AccessRead}}}); err != nil {
		t.Fatal(err)
	}
	if typ, code := until(next); typ != "ERROR" || code != http.StatusForbidden {
		t.Fatalf("after the read right was taken away: %s %v, want ERROR 403", typ, code)
	}
	if st, _, _ := aclDo(t, a, "GET", "/apis/apps/v1/widgets?watch=true", "", tok.SecretID); st != http.StatusForbidden {
		t.Fatalf("a new typed watch without the right: %d, want 403", st)
	}
	if _, err := mgmt.ACLPolicyPut(ctx, reader); err != nil {
		t.Fatal(err)
	}
	next = watch()
	if err := mgmt.ACLTokenDelete(ctx, tok.AccessorID); err != nil {
		t.Fatal(err)
	}
	if typ, code := until(next); typ != "ERROR" || code != http.StatusUnauthorized {
		t.Fatalf("after the token was deleted: %s %v, want ERROR 401", typ, code)
	}
}
