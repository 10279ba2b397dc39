package httpapi

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/ctoken"
)

// TestTokenVersionFollowsVoters: while some voter applies command format 2 at most (a
// release before sealed tokens, such as 85d08eb), list pages carry version 1 tokens,
// which that release reads; once every voter applies format 3 they are sealed. Found
// by the upgrade test: a downgraded node refused a new node's token mid-scan.
func TestTokenVersionFollowsVoters(t *testing.T) {
	ts := newTestServer(t)
	for i := range 3 {
		ts.put(fmt.Sprintf("tv/%d", i), "v")
	}
	for _, tc := range []struct {
		limit byte
		want  byte
	}{{fsm.CommandFormatV2, ctoken.Version1}, {fsm.CommandFormatV3, ctoken.Version2}, {0, ctoken.Version2}} {
		ts.store.SetFormatLimit(tc.limit)
		var page api.ListResponse
		ts.doJSON(http.MethodGet, "/v1/kv/tv/?list=true&limit=1", nil, http.StatusOK, &page)
		raw, err := base64.RawURLEncoding.DecodeString(page.Continue)
		if err != nil || len(raw) == 0 {
			t.Fatalf("limit %d: token %q: %v", tc.limit, page.Continue, err)
		}
		if raw[0] != tc.want {
			t.Errorf("voters apply format %d: token version %d, want %d", tc.limit, raw[0], tc.want)
		}
		var next api.ListResponse
		ts.doJSON(http.MethodGet, "/v1/kv/tv/?list=true&limit=1&continue="+url.QueryEscape(page.Continue), nil,
			http.StatusOK, &next)
		if len(next.Items) != 1 || next.Items[0].Key != "tv/1" {
			t.Errorf("limit %d: next page %+v, want tv/1", tc.limit, next.Items)
		}
	}
}

// TestListTokensNameNoForeignKey: a token that may read only other/ walks a list of
// the whole keyspace one item a page. Every page shows only other/ keys, and no
// continue token, opened with the cluster's own keys, names a key outside other/ —
// so even a leaked token key would not show the app/ keys (kills: next taken from the
// unfiltered scan; and with ctoken.TestTokenOpaque, tokens issued in clear).
//
//	keys: app/session-0..4, other/x, other/y, zzz
//	pages for other/: other/x, other/y, then the end (app/ and zzz never named)
func TestListTokensNameNoForeignKey(t *testing.T) {
	as := newACLServer(t)
	for _, k := range []string{"app/session-0", "app/session-1", "app/session-2", "app/session-3", "app/session-4",
		"other/x", "other/y", "zzz"} {
		as.mustAs(as.root, http.MethodPut, api.PathKV+k, []byte("v"), http.StatusOK, nil)
	}
	reader := as.tokenFor("other-read", "other/", api.AccessRead)
	secret, err := as.store.ClusterSecret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	codec := ctoken.NewCodec(secret)
	var seen []string
	q := url.Values{"list": {"true"}, "limit": {"1"}}
	for page := 0; ; page++ {
		if page > 20 {
			t.Fatalf("more than 20 pages: %v", seen)
		}
		var resp api.ListResponse
		as.mustAs(reader, http.MethodGet, api.PathKV+"?"+q.Encode(), nil, http.StatusOK, &resp)
		for _, it := range resp.Items {
			seen = append(seen, it.Key)
		}
		if resp.Continue == "" {
			break
		}
		tok, err := codec.Decode(resp.Continue)
		if err != nil {
			t.Fatalf("page %d: own token: %v", page, err)
		}
		if !strings.HasPrefix(string(tok.Next), "other/") {
			t.Fatalf("page %d: continue token names %q, which the token may not read", page, tok.Next)
		}
		q.Set("continue", resp.Continue)
	}
	if strings.Join(seen, ",") != "other/x,other/y" {
		t.Errorf("listed %v, want [other/x other/y]", seen)
	}
}
