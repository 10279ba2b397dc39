package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

func BenchmarkListPage500(b *testing.B)       { benchmarkListPage(b, 100_000, 500, false) }
func BenchmarkListPage500Binary(b *testing.B) { benchmarkListPage(b, 100_000, 500, true) }

// benchmarkListPage serves pages of limit items of a keys-key prefix through the
// handler (no network), walking the whole scan with continue tokens and starting over;
// binary asks for api.ContentTypeBinaryList and decodes each page as a client would.
func benchmarkListPage(b *testing.B, keys, limit int, binary bool) {
	ts := newTestServer(b)
	ts.putManyValues("bench/%07d", keys, 512)
	h := ts.srv.Handler()
	token := ""
	b.ReportAllocs()
	for b.Loop() {
		q := url.Values{"list": {"true"}, "limit": {fmt.Sprint(limit)}}
		if token != "" {
			q.Set("continue", token)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/v1/kv/bench/?"+q.Encode(), nil)
		if binary {
			req.Header.Set("Accept", api.ContentTypeBinaryList)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if !binary {
			token = continueOf(rec.Body.Bytes())
			continue
		}
		page, err := api.DecodeBinaryList(rec.Body.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		token = page.Continue
	}
}

// continueOf finds the continue token in a list response without decoding the items,
// so the benchmark measures the server.
func continueOf(body []byte) string {
	const field = `"continue":"`
	i := bytes.LastIndex(body, []byte(field))
	if i < 0 {
		return ""
	}
	rest := body[i+len(field):]
	return string(rest[:bytes.IndexByte(rest, '"')])
}
