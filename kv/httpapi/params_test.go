package httpapi

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/keel-kv/keel/kv"
)

// TestParseParamsAsParseQuery: parseParams reads a query as url.ParseQuery does — the
// same values for every name, an error exactly where ParseQuery fails — and on top
// refuses unknown names and repeats.
func TestParseParamsAsParseQuery(t *testing.T) {
	allowed := []string{"a", "b c", "list", "x"}
	cases := []struct {
		query string
		ours  bool // refused by parseParams only (unknown or repeated name)
	}{
		{"", false}, {"a=1", false}, {"a=1&list=true", false}, {"a", false}, {"a=", false},
		{"&&a=1&", false}, {"b+c=%2Fv", false}, {"b%20c=x+y", false}, {"x=a=b", false},
		{"a=%zz", false}, {"a=1;list=2", false}, {"%=1", false}, {"a=1&a=2", true},
		{"a=1&a", true}, {"nope=1", true}, {"a=1&Nope=2", true}, {"=1", true},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/v1/kv/k?"+c.query, nil)
		p, err := parseParams(r, allowed...)
		want, qerr := url.ParseQuery(c.query)
		switch {
		case qerr != nil || c.ours:
			if !errors.Is(err, kv.ErrInvalidParam) {
				t.Errorf("%q: err %v, want kv.ErrInvalidParam (ParseQuery: %v)", c.query, err, qerr)
			}
			continue
		case err != nil:
			t.Errorf("%q: %v", c.query, err)
			continue
		}
		if p.n != len(want) {
			t.Errorf("%q: %d parameters, ParseQuery %d", c.query, p.n, len(want))
		}
		for name, vals := range want {
			if got := p.get(name); !p.has(name) || got != vals[0] {
				t.Errorf("%q: %s = %q (present %v), ParseQuery %q", c.query, name, got, p.has(name), vals[0])
			}
		}
	}
}

// TestHasWatchParam: the connection limiter's shortcut answers as ParseQuery does.
func TestHasWatchParam(t *testing.T) {
	for _, q := range []string{"", "watch", "watch=true", "a=1&watch=1", "w%61tch=1", "watcher=1",
		"a=watch", "consistency=serializable", "a=%zz&watch=1", "%77atch", "x=1;watch=1"} {
		want, _ := url.ParseQuery(q)
		if got := hasWatchParam(q); got != want.Has("watch") {
			t.Errorf("%q: %v, ParseQuery says %v", q, got, want.Has("watch"))
		}
	}
}
