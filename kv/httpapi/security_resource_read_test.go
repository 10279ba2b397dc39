package httpapi

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestRawReadsFollowResourceRules: a typed resource's objects are plain keys under its
// prefix, and a raw /v1/kv read of them needs the resource's read right besides a key
// rule: a token that may read every key but holds no right on widgets reads none of
// them raw (get 403, lists, txn gets and watches skip or refuse them), while keys
// beside them stay readable. Kills: acl.Authorizer.Key/Span without the resource guard.
func TestRawReadsFollowResourceRules(t *testing.T) {
	as := &aclServer{testServer: newResourceServer(t)}
	var tok api.ACLToken
	as.doJSON(http.MethodPost, api.PathACLBootstrap, nil, http.StatusOK, &tok)
	as.root = tok.SecretID
	as.mustAs(as.root, http.MethodPut, "/apis/apps/v1/widgets/w1", objJSON(map[string]any{"spec": map[string]any{"size": 2}}),
		http.StatusCreated, nil)
	as.mustAs(as.root, http.MethodPut, api.PathKV+"plain", []byte("p"), http.StatusOK, nil)
	everyKey := as.tokenFor("every-key", "", api.AccessRead)
	as.policy(api.ACLPolicy{Name: "widgets-reader", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead}},
		Resources: []api.ACLResourceRule{{Group: "apps", Resource: "widgets", Access: api.AccessRead}}})
	widgets := as.token("widgets-reader")

	raw := api.PathKV + strings.ReplaceAll(url.PathEscape("/registry/apps/widgets/w1"), ".", "%2E")
	if code, b := as.doAs(everyKey, http.MethodGet, raw, nil); code != http.StatusForbidden {
		t.Fatalf("raw get of a widget without the widgets right = %d %s, want 403", code, b)
	}
	as.mustAs(widgets, http.MethodGet, raw, nil, http.StatusOK, nil)
	as.mustAs(everyKey, http.MethodGet, "/apis/apps/v1/widgets/w1", nil, http.StatusForbidden, nil)

	listAll := func(secret, path string) []string {
		var names []string
		for cont, i := "", 0; i < 100; i++ {
			var page api.ListResponse
			q := path
			if cont != "" {
				q += "&continue=" + url.QueryEscape(cont)
			}
			as.mustAs(secret, http.MethodGet, q, nil, http.StatusOK, &page)
			for _, kv := range page.Items {
				names = append(names, string(kv.Key))
			}
			if cont = page.Continue; cont == "" {
				break
			}
		}
		return names
	}
	if names := strings.Join(listAll(everyKey, api.PathKV+"?list=true"), " "); strings.Contains(names, "widgets/w1") ||
		!strings.Contains(names, "plain") {
		t.Fatalf("list of everything without the widgets right = %q: want plain, no widget", names)
	}
	if names := strings.Join(listAll(widgets, api.PathKV+"?list=true"), " "); !strings.Contains(names, "widgets/w1") ||
		!strings.Contains(names, "plain") {
		t.Fatalf("list of everything with the widgets right = %q: want plain and the widget", names)
	}
	txn := []byte(`{"success":[{"type":"get","key":"/registry/apps/widgets/w1"}]}`)
	if code, b := as.doAs(everyKey, http.MethodPost, api.PathTxn, txn); code != http.StatusForbidden {
		t.Fatalf("txn get of a widget without the widgets right = %d %s, want 403", code, b)
	}
	prefix := api.PathKV + strings.ReplaceAll(url.PathEscape("/registry/"), ".", "%2E") + "?list=true"
	if code, b := as.doAs(everyKey, http.MethodGet, prefix, nil); code == http.StatusOK && strings.Contains(string(b), "w1") {
		t.Fatalf("list of /registry/ without the widgets right shows the widget: %s", b)
	}
}
