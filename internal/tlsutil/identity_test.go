package tlsutil

import (
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestParseIdentity(t *testing.T) {
	for i, tc := range []struct {
		in   string
		want Identity
		ok   bool
	}{
		{"keel://node/n1", Identity{KindNode, "n1"}, true},
		{"keel://client/ops.team-1", Identity{KindClient, "ops.team-1"}, true},
		{"keel://node/" + strings.Repeat("a", 63), Identity{KindNode, strings.Repeat("a", 63)}, true},
		{"keel://node/" + strings.Repeat("a", 64), Identity{}, false},
		{"keel://node/", Identity{}, false},
		{"keel://node/n1/x", Identity{}, false},
		{"keel://node/-n1", Identity{}, false},
		{"keel://Node/n1", Identity{}, false},
		{"KEEL://node/n1", Identity{}, false},
		{"keel://admin/n1", Identity{}, false},
		{"keel://node", Identity{}, false},
		{"spiffe://node/n1", Identity{}, false},
		{"keel://node/n1?x=1", Identity{}, false},
		{"", Identity{}, false},
	} {
		got, err := ParseIdentity(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("#%d: ParseIdentity(%q) = %v, %v; want %v ok=%v", i, tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadIdentity) {
			t.Errorf("#%d: error %v is not ErrBadIdentity", i, err)
		}
	}
}

func TestIdentityOfCertificate(t *testing.T) {
	u := func(s string) *url.URL { p, _ := url.Parse(s); return p }
	for i, tc := range []struct {
		uris []*url.URL
		want error
	}{
		{[]*url.URL{u("keel://node/n1")}, nil},
		{[]*url.URL{u("spiffe://x/y"), u("keel://node/n1")}, nil}, // other schemes ignored
		{nil, ErrNoIdentity},
		{[]*url.URL{u("keel://node/n1"), u("keel://node/n2")}, ErrBadIdentity}, // two identities
		{[]*url.URL{u("keel://node/a/b")}, ErrBadIdentity},
	} {
		_, err := IdentityOf(&x509.Certificate{URIs: tc.uris})
		if !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
			t.Errorf("#%d: IdentityOf = %v, want %v", i, err, tc.want)
		}
	}
}

// FuzzParseIdentity: any string either parses to an identity that prints back as the
// same string, or is refused with ErrBadIdentity; nothing panics.
func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{"keel://node/n1", "keel://client/ops", "keel://node/", "keel://x/y", "keel:/node/n1", "keel://node/n1/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseIdentity(s)
		if err != nil {
			if !errors.Is(err, ErrBadIdentity) {
				t.Fatalf("ParseIdentity(%q): %v is not ErrBadIdentity", s, err)
			}
			return
		}
		if id.URI() != s {
			t.Fatalf("ParseIdentity(%q) = %v, which prints as %q", s, id, id.URI())
		}
		if _, err := url.Parse(s); err != nil {
			t.Fatalf("ParseIdentity accepted %q, which is not a URL: %v", s, err)
		}
	})
}
