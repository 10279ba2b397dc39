package differential

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The JSON gateway (issue #35 item 1): the same HTTP requests, every route etcd's
// gateway serves that keel's door serves too, with their error cases, sent to the
// embedded etcd 3.7's client port and to keel's etcd port, and the answers (status
// and body) compared after normGateway, which forgives what normalise_test.go does:
//
//   - revisions map to their rank among the script's writes (1), headers keep only
//     their revision (2), lease IDs map to their order of grant (3), a lease's
//     remaining TTL prints "live" (4), a watch's events compare as one list, sorted
//     by key within a revision (7);
//   - the member list, Status and /version compare by shape (their fields, not their
//     values): they name the server and its version, not the answer;
//   - every JSON answer compares as a value, and an error's message with its spaces
//     made plain: protojson spaces its output, and its errors, at random.
//
// TestGatewayAuthAsEtcds runs a second script against a keel and an etcd of its own
// with auth on: authenticate (keel's user "keel" with an ACL token's secret as
// password, etcd's user and role with the same prefix), then the token in the
// Authorization header, served within the prefix and refused outside it.

// gwStep is one request of the script. Its body (and path) may hold placeholders,
// replaced for each server: {{K:x}} the base64 of the script's prefix + x, {{V:x}}
// the base64 of x, {{L:i}} the ID of the i-th lease the script granted, {{W:i}} the
// revision of its i-th write (from 1).
type gwStep struct {
	name, method, path, body string
	write                    bool // etcd's revision grows with it: its header revision is a write's
	lines                    int  // a stream: read this many lines (or what comes within a second), then close
	// drop names fields left out of both answers, anywhere: a difference the door
	// keeps, listed in docs/etcd.md ("Differences that remain").
	drop []string
	// auth is the Authorization header: "token" the one the script's authenticate
	// step got, any other value itself.
	auth string
}

// gwAnswer is a server's answer to a step.
type gwAnswer struct {
	status int
	body   string   // a unary answer
	lines  []string // a stream's lines
}

var gwScript = []gwStep{
	{name: "range before", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:a}}"}`},
	{name: "put", method: "POST", path: "/v3/kv/put", body: `{"key":"{{K:a}}","value":"{{V:v1}}"}`, write: true},
	{name: "put prev_kv", method: "POST", path: "/v3/kv/put", body: `{"key":"{{K:b}}","value":"{{V:v2}}","prev_kv":true}`, write: true},
	{name: "overwrite prev_kv", method: "POST", path: "/v3/kv/put", body: `{"key":"{{K:b}}","value":"{{V:v2b}}","prev_kv":true}`, write: true},
	{name: "range one", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:a}}"}`},
	{name: "range many", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:a}}","range_end":"{{K:c}}"}`},
	{name: "range limit count_only", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:a}}","range_end":"{{K:c}}","count_only":true}`},
	{name: "range keys_only limit", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:a}}","range_end":"{{K:c}}","keys_only":true,"limit":1}`},
	{name: "range missing key", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:zz}}"}`},
	{name: "range bad base64", method: "POST", path: "/v3/kv/range", body: `{"key":"not base64!"}`},
	{name: "range bad JSON", method: "POST", path: "/v3/kv/range", body: `{"key":`},
	{name: "range empty key", method: "POST", path: "/v3/kv/range", body: `{}`},
	{name: "put empty key", method: "POST", path: "/v3/kv/put", body: `{"value":"{{V:x}}"}`},
	{name: "range future revision", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:a}}","revision":"100000000"}`},
	{name: "txn success", method: "POST", path: "/v3/kv/txn", body: `{"compare":[{"key":"{{K:a}}","target":"VALUE","result":"EQUAL","value":"{{V:v1}}"}],` +
		`"success":[{"request_put":{"key":"{{K:c}}","value":"{{V:v3}}"}}],"failure":[{"request_range":{"key":"{{K:a}}"}}]}`, write: true},
	{name: "txn failure", method: "POST", path: "/v3/kv/txn", body: `{"compare":[{"key":"{{K:a}}","target":"VERSION","result":"GREATER","version":"5"}],` +
		`"success":[{"request_put":{"key":"{{K:c}}","value":"{{V:no}}"}}],"failure":[{"request_range":{"key":"{{K:a}}","range_end":"{{K:d}}"}}]}`},
	{name: "txn mod_revision compare", method: "POST", path: "/v3/kv/txn", body: `{"compare":[{"key":"{{K:a}}","target":"MOD","result":"EQUAL","mod_revision":"{{W:1}}"}],` +
		`"success":[{"request_delete_range":{"key":"{{K:c}}","prev_kv":true}}]}`, write: true},
	{name: "txn duplicate key", method: "POST", path: "/v3/kv/txn", body: `{"success":[{"request_put":{"key":"{{K:e}}","value":"{{V:1}}"}},{"request_put":{"key":"{{K:e}}","value":"{{V:2}}"}}]}`},
	{name: "deleterange prev_kv", method: "POST", path: "/v3/kv/deleterange", body: `{"key":"{{K:b}}","prev_kv":true}`, write: true},
	{name: "deleterange missing", method: "POST", path: "/v3/kv/deleterange", body: `{"key":"{{K:b}}"}`},
	{name: "lease grant", method: "POST", path: "/v3/lease/grant", body: `{"TTL":"60"}`},
	{name: "put with lease", method: "POST", path: "/v3/kv/put", body: `{"key":"{{K:l}}","value":"{{V:x}}","lease":"{{L:0}}"}`, write: true},
	{name: "put with unknown lease", method: "POST", path: "/v3/kv/put", body: `{"key":"{{K:l2}}","value":"{{V:x}}","lease":"1234567"}`},
	{name: "lease timetolive keys", method: "POST", path: "/v3/lease/timetolive", body: `{"ID":"{{L:0}}","keys":true}`},
	{name: "lease timetolive unknown", method: "POST", path: "/v3/lease/timetolive", body: `{"ID":"1234567"}`},
	{name: "lease leases", method: "POST", path: "/v3/lease/leases", body: `{}`},
	{name: "lease keepalive", method: "POST", path: "/v3/lease/keepalive", body: `{"ID":"{{L:0}}"}`, lines: 1},
	{name: "lease keepalive unknown", method: "POST", path: "/v3/lease/keepalive", body: `{"ID":"1234567"}`, lines: 1},
	{name: "lease revoke unknown", method: "POST", path: "/v3/lease/revoke", body: `{"ID":"1234567"}`},
	{name: "lease revoke", method: "POST", path: "/v3/lease/revoke", body: `{"ID":"{{L:0}}"}`, write: true},
	{name: "watch from the first write", method: "POST", path: "/v3/watch",
		body: `{"create_request":{"key":"{{K:}}","range_end":"{{K:~}}","start_revision":"{{W:1}}","prev_kv":true}}`, lines: 8},
	{name: "compaction", method: "POST", path: "/v3/kv/compaction", body: `{"revision":"{{W:2}}"}`},
	{name: "range compacted revision", method: "POST", path: "/v3/kv/range", body: `{"key":"{{K:a}}","revision":"{{W:1}}"}`},
	{name: "watch compacted revision", method: "POST", path: "/v3/watch",
		body: `{"create_request":{"key":"{{K:}}","range_end":"{{K:~}}","start_revision":"{{W:1}}"}}`, lines: 2,
		// keel's answers to a watch from a compacted revision carry the header of
		// revision 0 and say why in cancel_reason; etcd's, its revision and no reason
		// (clientv3 reads compact_revision alone).
		drop: []string{"header", "cancel_reason"}},
	{name: "watch at the compact revision", method: "POST", path: "/v3/watch",
		body: `{"create_request":{"key":"{{K:}}","range_end":"{{K:~}}","start_revision":"{{W:2}}","prev_kv":true}}`, lines: 6},
	{name: "compaction again", method: "POST", path: "/v3/kv/compaction", body: `{"revision":"{{W:1}}"}`},
	{name: "compaction future", method: "POST", path: "/v3/kv/compaction", body: `{"revision":"100000000"}`},
	{name: "member list", method: "POST", path: "/v3/cluster/member/list", body: `{}`},
	// keel has no backend quota: its dbSizeQuota is 0, which etcd's marshaler leaves out.
	{name: "status", method: "POST", path: "/v3/maintenance/status", body: `{}`, drop: []string{"dbSizeQuota"}},
	{name: "unknown route", method: "POST", path: "/v3/kv/nothing", body: `{}`},
	{name: "GET a POST route", method: "GET", path: "/v3/kv/range"},
	{name: "v3beta", method: "POST", path: "/v3beta/kv/range", body: `{"key":"{{K:a}}"}`},
	{name: "version", method: "GET", path: "/version"},
	{name: "health", method: "GET", path: "/health"},
	{name: "health serializable", method: "GET", path: "/health?serializable=true"},
	{name: "POST health", method: "POST", path: "/health"},
}

// gwRun is one server's run of the script: what the placeholders stand for there.
type gwRun struct {
	srv    *server
	prefix string
	leases []string // granted lease IDs, in order
	writes []int64  // header revisions of the write steps, in order
	base   int64    // the revision before the script
	ttls   []int64  // granted TTLs, by lease
	// user and password authenticate ({{U:}}, {{P:}}); token is what that answered.
	user, password, token string
}

func TestGatewayAsEtcds(t *testing.T) {
	prefix := fmt.Sprintf("gwdiff/%d/", time.Now().UnixNano())
	runs := []*gwRun{{srv: keelSrv, prefix: prefix}, {srv: etcdSrv, prefix: prefix}}
	for _, st := range gwScript {
		var norm [2]string
		for i, r := range runs {
			a, err := r.do(st)
			if err != nil {
				t.Fatalf("%s: %s: %v", st.name, r.srv.name, err)
			}
			norm[i] = r.normAnswer(st, a)
		}
		t.Logf("%s: %s", st.name, norm[1])
		if norm[0] != norm[1] {
			t.Errorf("%s: %s %s\n keel: %s\n etcd: %s", st.name, st.method, st.path, norm[0], norm[1])
		}
	}
}

var placeholder = regexp.MustCompile(`\{\{([KVLWUP]):([^}]*)\}\}`)

// fill replaces the placeholders of s for this run.
func (r *gwRun) fill(s string) (string, error) {
	var err error
	out := placeholder.ReplaceAllStringFunc(s, func(m string) string {
		p := placeholder.FindStringSubmatch(m)
		switch p[1] {
		case "K":
			return base64.StdEncoding.EncodeToString([]byte(r.prefix + p[2]))
		case "V":
			return base64.StdEncoding.EncodeToString([]byte(p[2]))
		case "U":
			return r.user
		case "P":
			return r.password
		case "L":
			i, _ := strconv.Atoi(p[2])
			if i >= len(r.leases) {
				err = fmt.Errorf("lease %d not granted", i)
				return ""
			}
			return r.leases[i]
		default:
			i, _ := strconv.Atoi(p[2])
			if i < 1 || i > len(r.writes) {
				err = fmt.Errorf("no write %d", i)
				return ""
			}
			return strconv.FormatInt(r.writes[i-1], 10)
		}
	})
	return out, err
}

// do sends st to the run's server and notes what later steps refer to.
func (r *gwRun) do(st gwStep) (gwAnswer, error) {
	body, err := r.fill(st.body)
	if err != nil {
		return gwAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if st.method == http.MethodPost {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, st.method, "http://"+r.srv.addr+st.path, rd)
	if err != nil {
		return gwAnswer{}, err
	}
	switch st.auth {
	case "":
	case "token":
		req.Header.Set("Authorization", r.token)
	default:
		req.Header.Set("Authorization", st.auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return gwAnswer{}, err
	}
	defer resp.Body.Close()
	a := gwAnswer{status: resp.StatusCode}
	if st.lines > 0 && resp.StatusCode == http.StatusOK {
		a.lines = readLines(resp.Body, st.lines, time.Second)
	} else {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return a, err
		}
		a.body = string(b)
	}
	var v struct {
		Header struct{ Revision string }
		ID     string
		TTL    string
		Token  string
	}
	json.Unmarshal([]byte(a.body), &v)
	rev, _ := strconv.ParseInt(v.Header.Revision, 10, 64)
	switch {
	case st.name == "range before":
		r.base = rev
	case st.write:
		r.writes = append(r.writes, rev)
	}
	if st.path == "/v3/auth/authenticate" && v.Token != "" {
		r.token = v.Token
	}
	if st.path == "/v3/lease/grant" && v.ID != "" {
		ttl, _ := strconv.ParseInt(v.TTL, 10, 64)
		r.leases = append(r.leases, v.ID)
		r.ttls = append(r.ttls, ttl)
	}
	return a, nil
}

// readLines reads up to n lines of a stream, or what comes within wait.
func readLines(body io.ReadCloser, n int, wait time.Duration) []string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReader(body)
		for {
			l, err := br.ReadString('\n')
			if strings.TrimSpace(l) != "" {
				lines <- l
			}
			if err != nil {
				return
			}
		}
	}()
	var out []string
	timeout := time.After(wait)
	for len(out) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				return out
			}
			out = append(out, l)
		case <-timeout:
			body.Close()
			return out
		}
	}
	body.Close()
	for range lines { // the reader ends once the body is closed
	}
	return out
}

// normAnswer is an answer's normal form (see the top of this file).
func (r *gwRun) normAnswer(st gwStep, a gwAnswer) string {
	decodeJSON := func(s string) (any, bool) {
		v, ok := decodeJSON(s)
		if ok {
			dropFields(v, st.drop)
			dropV1Errors(v)
		}
		return v, ok
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d ", a.status)
	if st.lines > 0 && a.status == http.StatusOK {
		// A stream: its results with their events gathered into one list.
		var events []any
		for _, l := range a.lines {
			v, ok := decodeJSON(l)
			if !ok {
				fmt.Fprintf(&b, "line %q; ", l)
				continue
			}
			if m, ok := v.(map[string]any); ok {
				if res, ok := m["result"].(map[string]any); ok {
					if evs, ok := res["events"].([]any); ok {
						events = append(events, evs...)
						delete(res, "events")
						if len(res) == 1 && res["header"] != nil {
							continue // an answer that only carried events
						}
					}
				}
			}
			fmt.Fprintf(&b, "%s; ", r.norm(v, ""))
		}
		sortEvents(events)
		fmt.Fprintf(&b, "events %s", r.norm(events, ""))
		return b.String()
	}
	v, ok := decodeJSON(a.body)
	if !ok {
		b.WriteString(strings.TrimSpace(a.body))
		return b.String()
	}
	switch st.path {
	case "/v3/cluster/member/list", "/v3/maintenance/status", "/version":
		b.WriteString(shape(v))
	default:
		b.WriteString(r.norm(v, ""))
	}
	return b.String()
}

func decodeJSON(s string) (any, bool) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return nil, false
	}
	return v, true
}

// dropV1Errors deletes from an error answer what keel writes beside etcd 3.7's status
// for the clients of etcd 3.4's gateway (grpc-gateway v1): the message again as
// "error" in a unary answer, grpc_code, http_code and http_status in a stream's
// error (docs/etcd.md, "The JSON gateway"; kv/etcdv3's errorsBothWays).
func dropV1Errors(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if _, isStatus := m["code"]; isStatus {
		if e, ok := m["error"].(string); ok && e == m["message"] {
			delete(m, "error")
		}
	}
	if e, ok := m["error"].(map[string]any); ok {
		delete(e, "grpc_code")
		delete(e, "http_code")
		delete(e, "http_status")
	}
}

// dropFields deletes the fields names from v, at every depth.
func dropFields(v any, names []string) {
	switch v := v.(type) {
	case map[string]any:
		for _, n := range names {
			delete(v, n)
		}
		for _, e := range v {
			dropFields(e, names)
		}
	case []any:
		for _, e := range v {
			dropFields(e, names)
		}
	}
}

// sortEvents sorts a watch's events by revision, then key, within a revision.
func sortEvents(evs []any) {
	key := func(e any) (int64, string) {
		m, _ := e.(map[string]any)
		kv, _ := m["kv"].(map[string]any)
		rev, _ := strconv.ParseInt(fmt.Sprint(kv["mod_revision"]), 10, 64)
		return rev, fmt.Sprint(kv["key"])
	}
	sort.SliceStable(evs, func(i, j int) bool {
		ri, ki := key(evs[i])
		rj, kj := key(evs[j])
		if ri != rj {
			return ri < rj
		}
		return ki < kj
	})
}

// revisionFields hold revisions (as strings, int64 in etcd's JSON).
var revisionFields = map[string]bool{"revision": true, "mod_revision": true, "create_revision": true,
	"compact_revision": true}

// norm prints v with the normalisations applied; field is the name v is under.
func (r *gwRun) norm(v any, field string) string {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if field == "header" && k != "revision" {
				continue // cluster_id, member_id, raft_term name the server
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var b bytes.Buffer
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q:%s", k, r.norm(v[k], k))
		}
		b.WriteByte('}')
		return b.String()
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = r.norm(e, field)
		}
		if field == "leases" || field == "keys" {
			slices.Sort(parts) // etcd lists them in map order
		}
		return "[" + strings.Join(parts, ",") + "]"
	case string:
		switch {
		case revisionFields[field]:
			return r.rank(v)
		case field == "ID" || field == "lease":
			if i := slices.Index(r.leases, v); i >= 0 {
				return fmt.Sprintf("L%d", i)
			}
			return strconv.Quote(v)
		case field == "token":
			return `"<token>"` // each server's own
		case field == "message":
			// protojson's errors, like its output, space at random (U+00A0 or not).
			return strconv.Quote(strings.ReplaceAll(v, "\u00a0", " "))
		case field == "TTL":
			n, _ := strconv.ParseInt(v, 10, 64)
			if n > 0 && len(r.ttls) > 0 && n <= slices.Max(r.ttls) {
				return `"live"`
			}
		}
		return strconv.Quote(v)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// rank maps a revision to its rank among the script's writes: r0 is the revision
// before the script, ri that of its i-th write; a revision between two writes maps
// to the lower one; one before the script prints as "old".
func (r *gwRun) rank(s string) string {
	rev, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return strconv.Quote(s)
	}
	if rev < r.base {
		return `"old"`
	}
	n := 0
	for _, w := range r.writes {
		if w <= rev {
			n++
		}
	}
	return fmt.Sprintf(`"r%d"`, n)
}

// shape is v with its values left out: the sorted field names, recursively.
func shape(v any) string {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + ":" + shape(v[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		if len(v) == 0 {
			return "[]"
		}
		return "[" + shape(v[0]) + " x" + strconv.Itoa(len(v)) + "]"
	default:
		return "_"
	}
}

var gwAuthScript = []gwStep{
	{name: "authenticate wrong password", method: "POST", path: "/v3/auth/authenticate", body: `{"name":"{{U:}}","password":"wrong"}`},
	{name: "authenticate", method: "POST", path: "/v3/auth/authenticate", body: `{"name":"{{U:}}","password":"{{P:}}"}`},
	{name: "range before", method: "POST", path: "/v3/kv/range", body: `{"key":"{{V:app/a}}"}`, auth: "token"},
	{name: "put within the prefix", method: "POST", path: "/v3/kv/put", body: `{"key":"{{V:app/a}}","value":"{{V:v}}"}`, auth: "token", write: true},
	{name: "range within the prefix", method: "POST", path: "/v3/kv/range", body: `{"key":"{{V:app/a}}"}`, auth: "token"},
	{name: "range outside the prefix", method: "POST", path: "/v3/kv/range", body: `{"key":"{{V:other/a}}"}`, auth: "token"},
	{name: "put outside the prefix", method: "POST", path: "/v3/kv/put", body: `{"key":"{{V:other/a}}","value":"{{V:v}}"}`, auth: "token"},
	{name: "delete outside the prefix", method: "POST", path: "/v3/kv/deleterange", body: `{"key":"{{V:other/a}}"}`, auth: "token"},
	{name: "txn outside the prefix", method: "POST", path: "/v3/kv/txn", body: `{"success":[{"request_put":{"key":"{{V:other/a}}","value":"{{V:v}}"}}]}`, auth: "token"},
	// keel's refused watch carries the header of revision 0 and the etcd error's
	// message as its cancel_reason; etcd's, its revision and the gRPC status's whole
	// text ("rpc error: code = PermissionDenied desc = etcdserver: permission denied").
	{name: "watch outside the prefix", method: "POST", path: "/v3/watch", body: `{"create_request":{"key":"{{V:other/a}}"}}`, auth: "token", lines: 1,
		drop: []string{"header", "cancel_reason"}},
	{name: "compaction without the right", method: "POST", path: "/v3/kv/compaction", body: `{"revision":"{{W:1}}"}`, auth: "token"},
	{name: "unknown token", method: "POST", path: "/v3/kv/range", body: `{"key":"{{V:app/a}}"}`, auth: "no-such-token"},
}

func TestGatewayAuthAsEtcds(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if err := os.Mkdir(filepath.Join(dir, "keel"), 0o700); err != nil {
		t.Fatal(err)
	}
	kc, _, httpAddr, stopKeel, err := launchKeel(filepath.Join(dir, "keel"), "-acl-default", "deny")
	if err != nil {
		t.Fatal(err)
	}
	defer stopKeel()
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	keelHTTP(t, httpAddr, "", "POST", "/v1/acl/bootstrap", "", &boot)
	keelHTTP(t, httpAddr, boot.SecretID, "PUT", "/v1/acl/policies/app", `{"name":"app","keys":[{"prefix":"app/","access":"write"}]}`, nil)
	var app struct {
		SecretID string `json:"secret_id"`
	}
	keelHTTP(t, httpAddr, boot.SecretID, "POST", "/v1/acl/tokens", `{"policies":["app"]}`, &app)

	ec, _, stopEtcd, err := launchEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	defer stopEtcd()
	for _, step := range []func() error{
		func() error { _, err := ec.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := ec.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := ec.RoleAdd(ctx, "app"); return err },
		func() error {
			_, err := ec.RoleGrantPermission(ctx, "app", "app/", "app0", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := ec.UserAdd(ctx, "app", "apppw"); return err },
		func() error { _, err := ec.UserGrantRole(ctx, "app", "app"); return err },
		func() error { _, err := ec.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("etcd auth set-up: %v", err)
		}
	}

	runs := []*gwRun{
		{srv: &server{name: "keel", c: kc, addr: kc.Endpoints()[0]}, user: "keel", password: app.SecretID},
		{srv: &server{name: "etcd", c: ec, addr: ec.Endpoints()[0]}, user: "app", password: "apppw"},
	}
	for _, st := range gwAuthScript {
		var norm [2]string
		for i, r := range runs {
			a, err := r.do(st)
			if err != nil {
				t.Fatalf("%s: %s: %v", st.name, r.srv.name, err)
			}
			norm[i] = r.normAnswer(st, a)
		}
		t.Logf("%s: %s", st.name, norm[1])
		if norm[0] != norm[1] {
			t.Errorf("%s: %s %s\n keel: %s\n etcd: %s", st.name, st.method, st.path, norm[0], norm[1])
		}
	}
}

// keelHTTP sends one request to keel's HTTP API and decodes its JSON answer into out.
func keelHTTP(t *testing.T, addr, secret, method, path, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v (%s)", method, path, err, b)
		}
	}
}
