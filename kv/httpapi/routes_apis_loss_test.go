package httpapi

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// newSchemaServer serves the schema file at path with a registered versions manager.
func newSchemaServer(t *testing.T, path string) *testServer {
	t.Helper()
	ts := newTestServer(t)
	s, err := versions.LoadSchema(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := versions.DefaultConfig()
	cfg.NodeID, cfg.Schema, cfg.Store = "n1", s, leaderStore{ts.store}
	m, err := versions.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.core.SetResources(m)
	m.Reconcile(context.Background())
	return ts
}

// storeRaw writes an object under a resource's prefix behind the API's back, tagged
// with version (as an older release or a forced write could have left it).
func (ts *testServer) storeRaw(t *testing.T, name, version, value string) {
	t.Helper()
	res, err := ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{
		Type: fsm.OpPut, Key: []byte("/registry/apps/widgets/" + name), Value: []byte(value),
		Encoding: versions.EncodingTag("apps/widgets", version)}}}})
	if err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
}

func spec(obj map[string]any) map[string]any { return obj["spec"].(map[string]any) }

// TestResourceRedBlueRoundTrip is issue 10's regression, with the example schema of
// release 2 (docs/examples/widgets-v2.yaml): create a v2 widget with spec.color red,
// read it through v1, PUT that body back with its metadata.revision, read it through
// v2. The color used to come back blue, silently; it must stay red.
func TestResourceRedBlueRoundTrip(t *testing.T) {
	ts := newSchemaServer(t, "../../docs/examples/widgets-v2.yaml")
	ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/w", []byte(`{"spec":{"replicas":1,"color":"red"}}`), http.StatusCreated, nil)
	var v1 map[string]any
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets/w", nil, http.StatusOK, &v1)
	if _, marked := v1["metadata"].(map[string]any)["downgraded"]; marked || spec(v1)["color"] != nil || spec(v1)["size"] != 1.0 {
		t.Fatalf("v1 view = %v", v1)
	}
	spec(v1)["size"] = 3
	var put map[string]any
	ts.doJSON(http.MethodPut, "/apis/apps/v1/widgets/w", objJSON(v1), http.StatusOK, &put)
	var v2 map[string]any
	ts.doJSON(http.MethodGet, "/apis/apps/v2/widgets/w", nil, http.StatusOK, &v2)
	if spec(v2)["color"] != "red" || spec(v2)["replicas"] != 3.0 {
		t.Fatalf("v2 after writing the v1 view back = %v, want color red, replicas 3", v2)
	}
	// The same body again is a stale compare-and-swap, not a blind overwrite.
	ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/w", objJSON(v1), http.StatusConflict, api.ReasonConflict)
	// A blind v1 write (no revision) carries the color over too.
	ts.doJSON(http.MethodPut, "/apis/apps/v1/widgets/w", []byte(`{"spec":{"size":4}}`), http.StatusOK, nil)
	ts.doJSON(http.MethodGet, "/apis/apps/v2/widgets/w", nil, http.StatusOK, &v2)
	if spec(v2)["color"] != "red" || spec(v2)["replicas"] != 4.0 {
		t.Fatalf("v2 after a blind v1 write = %v", v2)
	}
}

// TestResourceWriteMustReadEverywhere: a write that some served version could not
// read is a 400 naming the field, and nothing is stored; one such object stored
// anyway (by an older release) does not fail a list: it is reported in "errors".
func TestResourceWriteMustReadEverywhere(t *testing.T) {
	ts := newSchemaServer(t, "../../docs/examples/widgets-v2.yaml")
	rev := ts.revision()
	e := ts.expectError(http.MethodPut, "/apis/apps/v2/widgets/t", []byte(`{"spec":{"replicas":1,"size":7}}`),
		http.StatusBadRequest, api.ReasonBadRequest)
	if !strings.Contains(e.Message, "spec.size") || !strings.Contains(e.Message, "apps/v1") {
		t.Errorf("message %q does not name the field and the version", e.Message)
	}
	e = ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/t", []byte(`{"spec":{"replicas":7}}`),
		http.StatusBadRequest, api.ReasonBadRequest)
	if !strings.Contains(e.Message, "field spec.replicas") {
		t.Errorf("message %q does not name the field", e.Message)
	}
	if got := ts.revision(); got != rev {
		t.Fatalf("revision moved %d → %d", rev, got)
	}

	ts.doJSON(http.MethodPut, "/apis/apps/v1/widgets/a", []byte(`{"spec":{"size":1}}`), http.StatusCreated, nil)
	ts.storeRaw(t, "t", "v2", `{"apiVersion":"apps/v2","metadata":{"name":"t"},"spec":{"replicas":1,"size":7}}`)
	ts.doJSON(http.MethodPut, "/apis/apps/v1/widgets/z", []byte(`{"spec":{"size":2}}`), http.StatusCreated, nil)
	var list struct {
		Items  []map[string]any
		Errors []struct {
			Name, Reason, Message string
			Code                  int
			Revision              int64
		}
	}
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets", nil, http.StatusOK, &list)
	if len(list.Items) != 2 || len(list.Errors) != 1 {
		t.Fatalf("list = %+v, want 2 items and 1 error", list)
	}
	if e := list.Errors[0]; e.Name != "t" || e.Code != http.StatusBadRequest || e.Revision == 0 ||
		!strings.Contains(e.Message, "field spec.size already exists") {
		t.Errorf("error item = %+v", e)
	}
	list.Items, list.Errors = nil, nil
	ts.doJSON(http.MethodGet, "/apis/apps/v2/widgets", nil, http.StatusOK, &list)
	if len(list.Items) != 3 || len(list.Errors) != 0 {
		t.Errorf("v2 list = %+v, want 3 items", list)
	}
	ts.expectError(http.MethodGet, "/apis/apps/v1/widgets/t", nil, http.StatusBadRequest, api.ReasonBadRequest)
	// Repairing it through v2 works (the stored object is replaced, not carried over).
	ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/t", []byte(`{"spec":{"replicas":7}}`), http.StatusOK, nil)
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets/t", nil, http.StatusOK, nil)
}

// v1Preferred writes the example schema of release 2 with v1 preferred: the
// encoding is v1, as while an older release is still in the cluster or after the
// encoding moved back.
func v1Preferred(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/examples/widgets-v2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "widgets.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), "preferredVersion: v2", "preferredVersion: v1", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestResourceDowngraded: with objects encoded in v1, a v2 write of a color v1 cannot
// hold is 409 Downgraded unless forced; a v2-stored red widget read through v1 is
// marked metadata.downgraded, and writing that back is 409 Downgraded unless forced.
func TestResourceDowngraded(t *testing.T) {
	ts := newSchemaServer(t, v1Preferred(t))
	rev := ts.revision()
	e := ts.expectError(http.MethodPut, "/apis/apps/v2/widgets/w", []byte(`{"spec":{"replicas":1,"color":"red"}}`),
		http.StatusConflict, api.ReasonDowngraded)
	if !strings.Contains(e.Message, "spec.color") || !strings.Contains(e.Message, "force=true") {
		t.Errorf("message %q", e.Message)
	}
	if got := ts.revision(); got != rev {
		t.Fatalf("revision moved %d → %d", rev, got)
	}
	ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/w", []byte(`{"spec":{"replicas":1,"color":"blue"}}`), http.StatusCreated, nil)
	var v2 map[string]any
	ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/w?force=true", []byte(`{"spec":{"replicas":1,"color":"red"}}`), http.StatusOK, &v2)
	if spec(v2)["color"] != "blue" {
		t.Fatalf("forced write answered %v: the answer must show what was stored", v2)
	}

	// Stored in v2 (before the encoding moved back to v1), red.
	ts.storeRaw(t, "r", "v2", `{"apiVersion":"apps/v2","metadata":{"name":"r"},"spec":{"replicas":1,"color":"red"}}`)
	var v1 map[string]any
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets/r", nil, http.StatusOK, &v1)
	if v1["metadata"].(map[string]any)["downgraded"] != true {
		t.Fatalf("v1 view of a red widget that v1 storage cannot keep = %v, want metadata.downgraded", v1)
	}
	var list struct{ Items []map[string]any }
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets", nil, http.StatusOK, &list)
	if len(list.Items) != 2 || list.Items[0]["metadata"].(map[string]any)["downgraded"] != true ||
		list.Items[1]["metadata"].(map[string]any)["downgraded"] != nil {
		t.Errorf("list = %v", list.Items)
	}
	rev = ts.revision()
	ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/r", objJSON(v1), http.StatusConflict, api.ReasonDowngraded)
	delete(v1["metadata"].(map[string]any), "downgraded") // the server knows anyway
	ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/r", objJSON(v1), http.StatusConflict, api.ReasonDowngraded)
	if got := ts.revision(); got != rev {
		t.Fatalf("revision moved %d → %d", rev, got)
	}
	// Through v2 the whole object is visible: writing it (red) is a loss of the
	// encoding, said as such; blue is fine.
	ts.expectError(http.MethodPut, "/apis/apps/v2/widgets/r", []byte(`{"spec":{"replicas":1,"color":"red"}}`),
		http.StatusConflict, api.ReasonDowngraded)
	var forced map[string]any
	ts.doJSON(http.MethodPut, "/apis/apps/v1/widgets/r?force=true", objJSON(v1), http.StatusOK, &forced)
	if forced["metadata"].(map[string]any)["downgraded"] != nil {
		t.Errorf("after the forced write the object is still marked: %v", forced)
	}
	ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/r?force=maybe", objJSON(v1), http.StatusBadRequest, api.ReasonBadRequest)
	ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/r", []byte(`{"metadata":{"downgraded":1}}`), http.StatusBadRequest, api.ReasonBadRequest)
}

// TestReservedPrefix: /v1/kv writes under a typed resource's prefix or keel's system
// prefix — put, delete, delete by prefix or by a range that merely overlaps, txn
// writes in either branch, stream put and delete — are 403 ReservedPrefix and write
// nothing; the per-version counts stay. Reads are allowed.
func TestReservedPrefix(t *testing.T) {
	ts := newSchemaServer(t, "../../docs/examples/widgets-v2.yaml")
	ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/w", []byte(`{"spec":{"replicas":1}}`), http.StatusCreated, nil)
	ts.put("%2Fregistry%2Fother", "x")
	rev, counts := ts.revision(), ts.store.FSM().View().Encodings()
	key := api.PathKV + "%2Fregistry%2Fapps%2Fwidgets%2Fw"
	refused := []struct {
		method, path, body string
	}{
		{http.MethodPut, key, `{}`},
		{http.MethodPut, api.PathKV + "%2Fregistry%2Fapps%2Fwidgets%2Fnew", `{}`},
		{http.MethodPut, api.PathKV + "%00keel%2Fx", `x`},
		{http.MethodDelete, key, ``},
		{http.MethodDelete, key + "?prefix=true", ``},
		{http.MethodDelete, api.PathKV + "%2Fregistry%2F?prefix=true", ``},
		{http.MethodDelete, api.PathKV + "%2F?prefix=true", ``},
		{http.MethodDelete, api.PathKV + "%00?prefix=true", ``},
		{http.MethodPost, api.PathTxn, `{"success":[{"type":"put","key":"/registry/apps/widgets/w","value":"e30="}]}`},
		{http.MethodPost, api.PathTxn, `{"success":[{"type":"get","key":"a"}],"failure":[{"type":"delete","key":"/registry/apps/widgets/w"}]}`},
		{http.MethodPost, api.PathTxn, `{"success":[{"type":"delete_range","key":"/registry/apps/","end":"/registry/apps/x"}]}`},
		{http.MethodPost, api.PathTxn, `{"success":[{"type":"delete_range","key":"/registry/apps/widgets/a","end":"/registry/b"}]}`},
		{http.MethodPost, api.PathTxn, `{"success":[{"type":"delete_range","key":"/registry/apps/widgets/x","prefix":true}]}`},
	}
	for i, tt := range refused {
		e := ts.expectError(tt.method, tt.path, []byte(tt.body), http.StatusForbidden, api.ReasonReservedPrefix)
		if !strings.Contains(e.Message, "keel's own records") && !strings.Contains(e.Message, "/apis/apps/{version}/widgets/{name}") {
			t.Errorf("#%d %s %s: message %q does not point to /apis", i, tt.method, tt.path, e.Message)
		}
	}
	conn, br := rawStream(t, ts)
	for id, req := range []*api.StreamRequest{
		{Op: api.StreamPut, Key: []byte("/registry/apps/widgets/w"), Value: []byte("{}")},
		{Op: api.StreamDelete, Key: []byte("/registry/apps/widgets/w")},
	} {
		req.ID = uint64(id + 1)
		conn.Write(api.AppendStreamRequest(nil, req))
		if r := readResponse(t, br); r.Err == nil || r.Err.Code != http.StatusForbidden || r.Err.Reason != api.ReasonReservedPrefix {
			t.Errorf("stream %v: answered %+v (err %+v), want 403 ReservedPrefix", req.Op, r, r.Err)
		}
	}
	if got := ts.revision(); got != rev {
		t.Fatalf("revision moved %d → %d", rev, got)
	}
	if got := ts.store.FSM().View().Encodings(); !reflect.DeepEqual(got, counts) {
		t.Errorf("encoding counts %v → %v", counts, got)
	}
	// Reads pass; writes beside the prefix too.
	ts.doJSON(http.MethodGet, key, nil, http.StatusOK, nil)
	ts.doJSON(http.MethodGet, api.PathKV+"%2Fregistry%2F?list=true", nil, http.StatusOK, nil)
	ts.doJSON(http.MethodPost, api.PathTxn, []byte(`{"success":[{"type":"get","key":"/registry/apps/widgets/w"}]}`), http.StatusOK, nil)
	ts.doJSON(http.MethodDelete, api.PathKV+"%2Fregistry%2Fother?prefix=true", nil, http.StatusOK, nil)
	ts.doJSON(http.MethodPost, api.PathTxn, []byte(`{"success":[{"type":"delete_range","key":"/registry/apps/widgets0","prefix":true}]}`), http.StatusOK, nil)
	if got := ts.revision(); got != rev+1 {
		t.Errorf("revision %d, want %d", got, rev+1)
	}
}
