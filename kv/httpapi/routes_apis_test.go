package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/versions"
)

// leaderStore is the local store as the versions manager sees it: always the leader.
type leaderStore struct{ *kvtest.LocalStore }

func (leaderStore) IsLeader() bool { return true }

// newResourceServer serves the schema of testdata/widgets-v1v2.yaml (widgets in v1 and
// v2, preferring v2) with a registered versions manager over the local store.
func newResourceServer(t *testing.T) *testServer {
	t.Helper()
	return withResources(t, newTestServer(t))
}

// withResources serves the widgets schema (testdata/widgets-v1v2.yaml) on ts.
func withResources(t *testing.T, ts *testServer) *testServer {
	t.Helper()
	s, err := versions.LoadSchema("testdata/widgets-v1v2.yaml")
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

func objJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// TestResourceCRUD: create (201), replace (200), optimistic locking (409), read in
// either version, delete (200, then 404), conditional delete.
func TestResourceCRUD(t *testing.T) {
	ts := newResourceServer(t)
	var created map[string]any
	ts.doJSON(http.MethodPut, "/apis/apps/v1/widgets/w1", objJSON(map[string]any{"spec": map[string]any{"size": 2}}),
		http.StatusCreated, &created)
	meta := created["metadata"].(map[string]any)
	rev := int64(meta["revision"].(float64))
	if created["apiVersion"] != "apps/v1" || meta["name"] != "w1" || created["spec"].(map[string]any)["size"] != float64(2) {
		t.Fatalf("created = %v", created)
	}
	// Stored in v2 (this node's effective version): size renamed, color defaulted.
	var v2 map[string]any
	ts.doJSON(http.MethodGet, "/apis/apps/v2/widgets/w1", nil, http.StatusOK, &v2)
	if spec := v2["spec"].(map[string]any); spec["replicas"] != float64(2) || spec["color"] != "blue" || v2["apiVersion"] != "apps/v2" {
		t.Fatalf("v2 view = %v", v2)
	}
	kv, _ := ts.store.FSM().View().Get([]byte("/registry/apps/widgets/w1"), 0)
	if kv.Encoding != "apps/widgets/v2" {
		t.Errorf("stored encoding = %q", kv.Encoding)
	}
	stale := objJSON(map[string]any{"metadata": map[string]any{"revision": rev - 1}, "spec": map[string]any{"replicas": 3}})
	ts.expectError(http.MethodPut, "/apis/apps/v2/widgets/w1", stale, http.StatusConflict, api.ReasonConflict)
	fresh := objJSON(map[string]any{"metadata": map[string]any{"revision": rev}, "spec": map[string]any{"replicas": 3}})
	ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/w1", fresh, http.StatusOK, nil)
	ts.expectError(http.MethodDelete, fmt.Sprintf("/apis/apps/v2/widgets/w1?revision=%d", rev), nil, http.StatusConflict, api.ReasonConflict)
	ts.doJSON(http.MethodDelete, "/apis/apps/v2/widgets/w1", nil, http.StatusOK, nil)
	ts.expectError(http.MethodGet, "/apis/apps/v2/widgets/w1", nil, http.StatusNotFound, api.ReasonNotFound)
	ts.expectError(http.MethodDelete, "/apis/apps/v2/widgets/w1", nil, http.StatusNotFound, api.ReasonNotFound)
	ts.expectError(http.MethodGet, "/apis/apps/v3/widgets/w1", nil, http.StatusNotFound, api.ReasonNotFound)
	ts.expectError(http.MethodGet, "/apis/apps/v1/gizmos/w1", nil, http.StatusNotFound, api.ReasonNotFound)
}

// TestResourceBadInput: every malformed request is a 400 and writes nothing.
func TestResourceBadInput(t *testing.T) {
	ts := newResourceServer(t)
	rev := ts.revision()
	for i, body := range []string{
		``, `[]`, `"x"`, `{`, `{} {}`, `null`,
		`{"apiVersion":"apps/v2"}`,
		`{"metadata":[]}`,
		`{"metadata":{"name":"other"}}`,
		`{"metadata":{"revision":-1}}`,
		`{"metadata":{"revision":1.5}}`,
		`{"spec":{"size":1,"replicas":2}}`, // rename target exists after conversion
	} {
		code, b, _ := ts.do(http.MethodPut, "/apis/apps/v1/widgets/w", []byte(body))
		if code != http.StatusBadRequest {
			t.Errorf("#%d %s: %d %s, want 400", i, body, code, b)
		}
	}
	ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/UPPER", []byte(`{}`), http.StatusBadRequest, api.ReasonBadRequest)
	ts.expectError(http.MethodDelete, "/apis/apps/v1/widgets/w?revision=x", nil, http.StatusBadRequest, api.ReasonBadRequest)
	ts.expectError(http.MethodGet, "/apis/apps/v1/widgets?limit=-1", nil, http.StatusBadRequest, api.ReasonBadRequest)
	ts.expectError(http.MethodPut, api.PathKV+"%00keel/storageversions/apps/widgets", []byte("x"), http.StatusForbidden, api.ReasonReservedPrefix)
	ts.expectError(http.MethodDelete, api.PathKV+"?prefix=true", nil, http.StatusBadRequest, api.ReasonBadRequest)
	if got := ts.revision(); got != rev {
		t.Errorf("revision moved %d → %d", rev, got)
	}
}

// TestResourceList: pages of a list share one revision, convert every object to the
// requested version (whatever version it is stored in, tagged or not), and a token
// works only for the range it was issued for.
func TestResourceList(t *testing.T) {
	ts := newResourceServer(t)
	for i := range 25 {
		ts.doJSON(http.MethodPut, fmt.Sprintf("/apis/apps/v1/widgets/w%02d", i),
			objJSON(map[string]any{"spec": map[string]any{"size": i}}), http.StatusCreated, nil)
	}
	// An object written before the resource existed: untagged, read by its apiVersion.
	if res, err := ts.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{
		Type: fsm.OpPut, Key: []byte("/registry/apps/widgets/w99"),
		Value: []byte(`{"apiVersion":"apps/v1","metadata":{"name":"w99"},"spec":{"size":99}}`)}}}}); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	type list struct {
		Metadata struct {
			Revision int64
			Continue string
		}
		Items []map[string]any
	}
	var all []map[string]any
	q := url.Values{"limit": {"10"}}
	var rev int64
	pages := 0
	for {
		var l list
		ts.doJSON(http.MethodGet, "/apis/apps/v2/widgets?"+q.Encode(), nil, http.StatusOK, &l)
		pages++
		if rev == 0 {
			rev = l.Metadata.Revision
			ts.doJSON(http.MethodPut, "/apis/apps/v2/widgets/w00", objJSON(map[string]any{"spec": map[string]any{"replicas": 7}}), http.StatusOK, nil)
		} else if l.Metadata.Revision != rev {
			t.Fatalf("page %d at revision %d, want %d", pages, l.Metadata.Revision, rev)
		}
		all = append(all, l.Items...)
		if l.Metadata.Continue == "" {
			break
		}
		q.Set("continue", l.Metadata.Continue)
		if pages == 1 {
			// The same token on the KV list of another range is refused.
			ts.expectError(http.MethodGet, api.PathKV+"other/?list=true&continue="+url.QueryEscape(l.Metadata.Continue),
				nil, http.StatusBadRequest, api.ReasonInvalidContinueToken)
		}
	}
	if len(all) != 26 || pages != 3 {
		t.Fatalf("%d items in %d pages, want 26 in 3", len(all), pages)
	}
	for i, obj := range all {
		spec := obj["spec"].(map[string]any)
		want := float64(i)
		if i == 25 {
			want = 99
		}
		if obj["apiVersion"] != "apps/v2" || spec["replicas"] != want {
			t.Errorf("item %d = %v, want apps/v2 replicas %v (the snapshot before w00 changed)", i, obj, want)
		}
	}
	var disc struct {
		Resources []struct {
			Name, StorageVersion, StorageVersionHash string
		}
	}
	ts.doJSON(http.MethodGet, "/apis", nil, http.StatusOK, &disc)
	if len(disc.Resources) != 1 || disc.Resources[0].StorageVersion != "v2" || disc.Resources[0].StorageVersionHash == "" {
		t.Errorf("discovery = %+v", disc)
	}
}

// TestResourceNoSchema: without a schema the resource API has no routes but answers
// in JSON.
func TestResourceNoSchema(t *testing.T) {
	ts := newTestServer(t)
	ts.expectError(http.MethodGet, "/apis/apps/v1/widgets/w", nil, http.StatusNotFound, api.ReasonNotFound)
	ts.doJSON(http.MethodGet, "/apis", nil, http.StatusOK, nil)
}
