package kv

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// encodeV1 is the encoder of the releases that issue only version 1 tokens (signed,
// not encrypted): a new node must still read what they issued.
func (c *tokenCodec) encodeV1(t continueToken) string { return c.encodeAs(tokenVersion1, t) }

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
	}{{fsm.CommandFormatV2, tokenVersion1}, {fsm.CommandFormatV3, tokenVersion2}, {0, tokenVersion2}} {
		ts.store.SetFormatLimit(tc.limit)
		var page api.ListResponse
		ts.doJSON(http.MethodGet, "/v1/kv/tv/?list=true&limit=1", nil, http.StatusOK, &page)
		raw, err := tokenEncoding.DecodeString(page.Continue)
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

// TestTokenOpaque: a token issued now does not contain its keys in any form a client
// can read (kills: encode writing version 1, or sealing without encryption).
func TestTokenOpaque(t *testing.T) {
	c := newTokenCodec([]byte("secret"))
	tok := continueToken{Revision: 42, Next: []byte("app/session-7f3a"), Start: []byte("app/"), End: []byte("app0")}
	s := c.encode(tok)
	raw, err := tokenEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != tokenVersion2 {
		t.Fatalf("issued version %d, want %d", raw[0], tokenVersion2)
	}
	for _, k := range [][]byte{tok.Next, tok.Start, []byte("session")} {
		if bytes.Contains(raw, k) || strings.Contains(s, base64.RawURLEncoding.EncodeToString(k)[:4]) {
			t.Errorf("token %q shows %q", s, k)
		}
	}
	// Deterministic (a synthetic salt), but two positions share no salt.
	if s2 := c.encode(tok); s2 != s {
		t.Errorf("the same position encodes as %q and %q", s, s2)
	}
	tok.Next = []byte("app/session-7f3b")
	raw2, _ := tokenEncoding.DecodeString(c.encode(tok))
	if bytes.Equal(raw[1:1+tokenSaltSize], raw2[1:1+tokenSaltSize]) {
		t.Errorf("two positions share the salt %x", raw[1:1+tokenSaltSize])
	}
}

// TestTokenVersion1StillRead: a token of an older node (version 1) is served by a new
// one, so a scan survives a rolling upgrade; a version 1 token of another cluster, or
// tampered, is still refused.
func TestTokenVersion1StillRead(t *testing.T) {
	c := newTokenCodec([]byte("secret"))
	want := continueToken{Revision: 9, Next: []byte("a/b"), Start: []byte("a/"), End: []byte("a0")}
	got, err := c.decode(c.encodeV1(want))
	if err != nil || got.Revision != want.Revision || !bytes.Equal(got.Next, want.Next) {
		t.Fatalf("decode(v1) = %+v, %v; want %+v", got, err, want)
	}
	other := newTokenCodec([]byte("other")).encodeV1(want)
	if _, err := c.decode(other); !errors.Is(err, ErrInvalidContinueToken) {
		t.Errorf("foreign v1 token: %v, want ErrInvalidContinueToken", err)
	}
}

// TestTokenV2Tampered: flipping any byte of a version 2 token, or giving it to another
// cluster, is ErrInvalidContinueToken.
func TestTokenV2Tampered(t *testing.T) {
	c := newTokenCodec([]byte("secret"))
	s := c.encode(continueToken{Revision: 3, Next: []byte("a/b"), Start: []byte("a/"), End: []byte("a0")})
	raw, _ := tokenEncoding.DecodeString(s)
	for i := range raw {
		b := bytes.Clone(raw)
		b[i] ^= 0x20
		if _, err := c.decode(tokenEncoding.EncodeToString(b)); !errors.Is(err, ErrInvalidContinueToken) {
			t.Errorf("byte %d flipped: %v, want ErrInvalidContinueToken", i, err)
		}
	}
	if _, err := newTokenCodec([]byte("other")).decode(s); !errors.Is(err, ErrInvalidContinueToken) {
		t.Errorf("foreign token: %v, want ErrInvalidContinueToken", err)
	}
	if _, err := c.decode(tokenEncoding.EncodeToString(raw[:1+tokenSaltSize+tokenTagSize-1])); !errors.Is(err, ErrInvalidContinueToken) {
		t.Errorf("short token: %v", err)
	}
}

// TestListTokensNameNoForeignKey: a token that may read only other/ walks a list of
// the whole keyspace one item a page. Every page shows only other/ keys, and no
// continue token, opened with the cluster's own keys, names a key outside other/ —
// so even a leaked token key would not show the app/ keys (kills: next taken from the
// unfiltered scan; and with TestTokenOpaque, tokens issued in clear).
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
	codec, err := as.srv.tokenCodec(t.Context())
	if err != nil {
		t.Fatal(err)
	}
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
		tok, err := codec.decode(resp.Continue)
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
