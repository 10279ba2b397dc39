package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

func TestTxn(t *testing.T) {
	ts := newTestServer(t)
	r1 := ts.put("a", "1")
	ts.put("tmp/x", "x")
	ts.put("tmp/y", "y")
	body := fmt.Sprintf(`{
	  "compare": [{"key":"a","target":"mod_revision","result":"equal","int":%d},
	              {"key":"a","target":"value","result":"equal","value":"MQ=="},
	              {"key":"a","target":"exists","result":"equal","int":1},
	              {"key":"nope","target":"version","result":"equal","int":0}],
	  "success": [{"type":"get","key":"a"},
	              {"type":"put","key":"a","value":"Mg=="},
	              {"type":"delete_range","key":"tmp/","prefix":true},
	              {"type":"get","key":"a","end":"b","limit":5}],
	  "failure": [{"type":"get","key":"a"}]
	}`, r1)
	var resp api.TxnResponse
	ts.doJSON(http.MethodPost, "/v1/txn", []byte(body), http.StatusOK, &resp)
	if !resp.Succeeded || len(resp.Responses) != 4 || resp.Revision != ts.revision() {
		t.Fatalf("txn = %+v, want success with 4 responses at %d", resp, ts.revision())
	}
	get, put, dr := resp.Responses[0], resp.Responses[1], resp.Responses[2]
	if put.Type != api.OpPut || put.PrevKV == nil || string(put.PrevKV.Value) != "1" {
		t.Errorf("put response = %+v, want prev value 1", put)
	}
	if dr.Type != api.OpDeleteRange || dr.Deleted != 2 {
		t.Errorf("delete_range response = %+v, want 2 deleted", dr)
	}
	if get.Type != api.OpGet || len(get.KVs) != 1 || string(get.KVs[0].Value) != "1" {
		t.Errorf("get response = %+v, want a=1", get)
	}
	var a api.GetResponse
	ts.doJSON(http.MethodGet, "/v1/kv/a", nil, http.StatusOK, &a)
	if string(a.Value) != "2" || a.ModRevision != resp.Revision {
		t.Errorf("a after txn = %q at %d, want 2 at %d", a.Value, a.ModRevision, resp.Revision)
	}

	// The same guard now fails: the failure branch runs and nothing is written.
	before := ts.revision()
	ts.doJSON(http.MethodPost, "/v1/txn", []byte(body), http.StatusOK, &resp)
	if resp.Succeeded || len(resp.Responses) != 1 || string(resp.Responses[0].KVs[0].Value) != "2" {
		t.Fatalf("failed-guard txn = %+v, want failure branch reading a=2", resp)
	}
	if ts.revision() != before {
		t.Fatalf("failed-guard txn moved the revision %d → %d", before, ts.revision())
	}
}

// TestTxnBadBody: a body that is not a valid transaction is a 400 (413 when too big)
// and writes nothing, even when its valid parts come first.
func TestTxnBadBody(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxValueBytes = 64; c.MaxTxnBodyBytes = 8192 })
	ok := `{"type":"put","key":"w","value":"eA=="}`
	many := strings.TrimSuffix(strings.Repeat(ok+",", 129), ",")
	tests := []struct {
		body   string
		code   int
		reason string
	}{
		{``, 400, api.ReasonBadRequest},
		{`{`, 400, api.ReasonBadRequest},
		{`[]`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `]} {}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `],"bogus":1}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"put","key":""}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"frob","key":"k"}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"put","key":"k","value":"%%%"}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"delete","key":"k","prefix":true}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"delete_range","key":"k"}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"delete_range","key":"k","end":"a"}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"get","key":"k","end":"z","prefix":true}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"get","key":"k","limit":5}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"get","key":"k","prefix":true,"limit":-1}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"get","key":"k","value":"eA=="}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + many + `]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"k","target":"age","result":"equal"}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"k","target":"version","result":"lt"}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"k","target":"exists","result":"less","int":1}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"k","target":"exists","result":"equal","int":2}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"k","target":"value","result":"equal","int":2}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"k","target":"version","result":"equal","value":"eA=="}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"k","target":"version","result":"equal","int":-1}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"put","key":"k","value":"` + strings.Repeat("eHh4", 30) + `"}]}`, 413, api.ReasonTooLarge},
		{`{"success":[` + ok + `],"failure":[{"type":"put","key":"` + strings.Repeat("k", 5000) + `"}]}`, 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `],"failure":[{"type":"put","key":"` + strings.Repeat("k", 9000) + `"}]}`, 413, api.ReasonTooLarge},
		{`null`, 400, api.ReasonBadRequest},
		{" null\n", 400, api.ReasonBadRequest},
		// Strings encoding/json would turn into U+FFFD: refused, as in a URL.
		{"{\"success\":[" + ok + ",{\"type\":\"put\",\"key\":\"k\xff\"}]}", 400, api.ReasonBadRequest},
		{`{"success":[` + ok + `,{"type":"put","key":"k\ud800"}]}`, 400, api.ReasonBadRequest},
		{`{"compare":[{"key":"\udc00","target":"exists","result":"equal","int":1}],"success":[` + ok + `]}`, 400, api.ReasonBadRequest},
		{"{\"success\":[" + ok + ",{\"type\":\"delete_range\",\"key\":\"a\",\"end\":\"\xc3z\"}]}", 400, api.ReasonBadRequest},
	}
	for i, tt := range tests {
		before := ts.revision()
		e := ts.expectError(http.MethodPost, "/v1/txn", []byte(tt.body), tt.code, tt.reason)
		if e.Message == "" || ts.revision() != before {
			t.Errorf("#%d: message %q, revision %d → %d", i, e.Message, before, ts.revision())
		}
	}
	ts.expectError(http.MethodGet, "/v1/kv/w", nil, 404, api.ReasonNotFound)
	// The 400 names the field, as the URL's 400 names the key.
	e := ts.expectError(http.MethodPost, "/v1/txn", []byte(`{"success":[`+ok+`,{"type":"put","key":"k\ud800"}]}`), 400, api.ReasonBadRequest)
	if !strings.Contains(e.Message, "success[1].key") || !strings.Contains(e.Message, "UTF-8") {
		t.Errorf("invalid UTF-8 key: message %q does not name success[1].key", e.Message)
	}
	if e := ts.expectError(http.MethodPost, "/v1/txn", []byte(`null`), 400, api.ReasonBadRequest); !strings.Contains(e.Message, "null") {
		t.Errorf("null body: message %q", e.Message)
	}
	ts.expectError(http.MethodPost, "/v1/txn?dry=1", []byte(`{}`), 400, api.ReasonBadRequest)
}

func TestTxnReadOnlyAndEmpty(t *testing.T) {
	ts := newTestServer(t)
	ts.put("r/1", "a")
	ts.put("r/2", "b")
	before := ts.revision()
	var resp api.TxnResponse
	ts.doJSON(http.MethodPost, "/v1/txn", []byte(`{"success":[{"type":"get","key":"r/","prefix":true,"limit":1}]}`), 200, &resp)
	if len(resp.Responses) != 1 || len(resp.Responses[0].KVs) != 1 || !resp.Responses[0].More {
		t.Fatalf("ranged get with limit 1 = %+v, want 1 item and more", resp)
	}
	ts.doJSON(http.MethodPost, "/v1/txn", []byte(`{}`), 200, &resp)
	if !resp.Succeeded || resp.Revision != before || ts.revision() != before {
		t.Fatalf("empty txn = %+v, want success at unchanged revision %d", resp, before)
	}
	b, _ := json.Marshal(resp)
	if !strings.Contains(string(b), `"responses":[]`) {
		t.Errorf("empty txn responses encode as %s, want []", b)
	}
}

func TestCompact(t *testing.T) {
	ts := newTestServer(t)
	r1 := ts.put("k", "1")
	r2 := ts.put("k", "2")
	ts.put("k", "3")
	tests := []struct {
		body   string
		code   int
		reason string
	}{
		{fmt.Sprintf(`{"revision":%d}`, r2), 200, ""},
		{fmt.Sprintf(`{"revision":%d}`, r2), 410, api.ReasonResourceExpired},
		{fmt.Sprintf(`{"revision":%d}`, r1), 410, api.ReasonResourceExpired},
		{`{"revision":1000}`, 400, api.ReasonFutureRevision},
		{`{"revision":0}`, 400, api.ReasonBadRequest},
		{`{"revision":"x"}`, 400, api.ReasonBadRequest},
		{`{"rev":5}`, 400, api.ReasonBadRequest},
		{`nope`, 400, api.ReasonBadRequest},
	}
	for i, tt := range tests {
		if tt.code == 200 {
			var resp api.CompactResponse
			ts.doJSON(http.MethodPost, "/v1/compact", []byte(tt.body), 200, &resp)
			if resp.CompactRevision != r2 || resp.Revision != ts.revision() {
				t.Fatalf("#%d: compact = %+v, want compact revision %d at %d", i, resp, r2, ts.revision())
			}
			continue
		}
		ts.expectError(http.MethodPost, "/v1/compact", []byte(tt.body), tt.code, tt.reason)
	}
	ts.expectError(http.MethodGet, fmt.Sprintf("/v1/kv/k?revision=%d", r1), nil, 410, api.ReasonResourceExpired)
	var got api.GetResponse
	ts.doJSON(http.MethodGet, fmt.Sprintf("/v1/kv/k?revision=%d", r2), nil, 200, &got)
	if string(got.Value) != "2" {
		t.Fatalf("read at the compact revision = %q, want 2", got.Value)
	}
}

// TestTxnDuplicateKey: a branch that writes a key twice is refused with 400
// DuplicateKey naming the key, before it reaches the store (which would apply it and
// move the revision); reads, and the same key in different branches, are allowed.
func TestTxnDuplicateKey(t *testing.T) {
	ts := newTestServer(t)
	ts.put("y", "0")
	ts.put("z/1", "0")
	tests := []struct {
		body string
		dup  string // the key the 400 names; "" = allowed
	}{
		{`{"success":[{"type":"put","key":"x","value":"MQ=="},{"type":"put","key":"x","value":"Mg=="}]}`, "x"},
		{`{"success":[{"type":"put","key":"y","value":"MQ=="},{"type":"delete","key":"y"}]}`, "y"},
		{`{"success":[{"type":"delete_range","key":"z/","prefix":true},{"type":"put","key":"z/1","value":"MQ=="}]}`, "z/1"},
		{`{"failure":[{"type":"put","key":"f","value":"MQ=="},{"type":"put","key":"f","value":"Mg=="}]}`, "f"},

		{`{"success":[{"type":"get","key":"x"},{"type":"get","key":"x"}]}`, ""},
		{`{"success":[{"type":"put","key":"x","value":"MQ=="}],"failure":[{"type":"put","key":"x","value":"Mg=="}]}`, ""},
		{`{"success":[{"type":"get","key":"x"},{"type":"put","key":"x","value":"Mw=="}]}`, ""},
	}
	for i, tt := range tests {
		before := ts.revision()
		if tt.dup == "" {
			var resp api.TxnResponse
			ts.doJSON(http.MethodPost, "/v1/txn", []byte(tt.body), http.StatusOK, &resp)
			continue
		}
		e := ts.expectError(http.MethodPost, "/v1/txn", []byte(tt.body), http.StatusBadRequest, api.ReasonDuplicateKey)
		if !strings.Contains(e.Message, fmt.Sprintf("%q", tt.dup)) {
			t.Errorf("#%d: message %q does not name key %q", i, e.Message, tt.dup)
		}
		if ts.revision() != before {
			t.Errorf("#%d: revision %d → %d: the refused transaction was applied", i, before, ts.revision())
		}
	}
}

// TestTxnCreateRevisionGuard: "create_revision" guards the revision that created the
// key, not its mod revision, over POST /v1/txn and the stream's txn op alike. The key
// is created at A and modified at B: a guard equal to A holds, one equal to B fails.
func TestTxnCreateRevisionGuard(t *testing.T) {
	ts := newTestServer(t)
	a := ts.put("k", "1")
	ts.put("other", "x")
	b := ts.put("k", "2")
	conn, br := rawStream(t, ts)
	body := func(result string, operand int64) []byte {
		return []byte(fmt.Sprintf(`{"compare":[{"key":"k","target":"create_revision","result":%q,"int":%d}],
		  "success":[{"type":"get","key":"k"}]}`, result, operand))
	}
	for i, c := range []struct {
		result  string
		operand int64
		want    bool
	}{
		{api.ResultEqual, a, true}, {api.ResultEqual, b, false},
		{api.ResultLess, b, true}, {api.ResultGreater, a, false},
	} {
		var resp api.TxnResponse
		ts.doJSON(http.MethodPost, api.PathTxn, body(c.result, c.operand), http.StatusOK, &resp)
		if resp.Succeeded != c.want {
			t.Errorf("POST txn: create_revision %s %d (created %d, modified %d) succeeded %v, want %v",
				c.result, c.operand, a, b, resp.Succeeded, c.want)
		}
		sendReq(t, conn, api.StreamRequest{ID: uint64(i + 1), Op: api.StreamTxn, Value: body(c.result, c.operand)})
		r := readResponse(t, br)
		resp = api.TxnResponse{}
		if r.Err != nil || json.Unmarshal(r.Body, &resp) != nil {
			t.Fatalf("stream txn: %+v (err %+v)", r, r.Err)
		}
		if resp.Succeeded != c.want {
			t.Errorf("stream txn: create_revision %s %d (created %d, modified %d) succeeded %v, want %v",
				c.result, c.operand, a, b, resp.Succeeded, c.want)
		}
	}
}
