package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// listPage fetches one page of prefix.
func (ts *testServer) listPage(prefix string, q url.Values) api.ListResponse {
	ts.t.Helper()
	q.Set("list", "true")
	var resp api.ListResponse
	ts.doJSON(http.MethodGet, api.PathKV+prefix+"?"+q.Encode(), nil, http.StatusOK, &resp)
	return resp
}

// listAll follows continue tokens to the end, checking the KEP-365 page rules: at most
// limit items per page, strictly ascending keys, one revision for every page.
func (ts *testServer) listAll(prefix string, limit int) (items []api.KV, rev int64, pages, empty int) {
	ts.t.Helper()
	token := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if token != "" {
			q.Set("continue", token)
		}
		page := ts.listPage(prefix, q)
		pages++
		if len(page.Items) > limit {
			ts.t.Fatalf("page %d: %d items, more than limit %d", pages, len(page.Items), limit)
		}
		if pages == 1 {
			rev = page.Revision
		} else if page.Revision != rev {
			ts.t.Fatalf("page %d at revision %d, first page at %d", pages, page.Revision, rev)
		}
		if len(page.Items) == 0 && page.Continue != "" {
			empty++
		}
		for _, kv := range page.Items {
			if n := len(items); n > 0 && items[n-1].Key >= kv.Key {
				ts.t.Fatalf("page %d: key %q after %q", pages, kv.Key, items[n-1].Key)
			}
			items = append(items, kv)
		}
		if token = page.Continue; token == "" {
			return items, rev, pages, empty
		}
	}
}

func TestListBasics(t *testing.T) {
	ts := newTestServer(t)
	for _, k := range []string{"a/1", "a/2", "a0", "b/1"} {
		ts.put(k, "v-"+k)
	}
	rev := ts.revision()
	ts.put("a/3", "late")
	tests := []struct {
		path string
		keys []string
	}{
		{"/v1/kv/a/?list=true", []string{"a/1", "a/2", "a/3"}},
		{"/v1/kv/a?list=true", []string{"a/1", "a/2", "a/3", "a0"}},
		{"/v1/kv/?list=true", []string{"a/1", "a/2", "a/3", "a0", "b/1"}},
		{"/v1/kv/a/?list=true&revision=" + strconv.FormatInt(rev, 10), []string{"a/1", "a/2"}},
		{"/v1/kv/a/?list=true&consistency=serializable", []string{"a/1", "a/2", "a/3"}},
		{"/v1/kv/zzz?list=true", []string{}},
	}
	for i, tt := range tests {
		var resp api.ListResponse
		ts.doJSON(http.MethodGet, tt.path, nil, http.StatusOK, &resp)
		var keys []string
		for _, kv := range resp.Items {
			keys = append(keys, kv.Key)
			if want := "v-" + kv.Key; kv.Key != "a/3" && string(kv.Value) != want {
				t.Errorf("#%d: %s = %q, want %q", i, kv.Key, kv.Value, want)
			}
		}
		if fmt.Sprint(keys) != fmt.Sprint(tt.keys) || resp.Continue != "" || resp.Items == nil {
			t.Errorf("#%d: %s = %v continue %q, want %v and no continue", i, tt.path, keys, resp.Continue, tt.keys)
		}
	}
}

// TestListWholeOrRefused: a list without ?limit= (or limit=0) is the whole list, never
// a silent first page; one larger than MaxListLimit items or MaxListBytes is refused
// with 413 ListTooLarge naming the bound and ?limit=, and paging still reads it.
// Kills: scanAll returning its first page without ErrListTooLarge (a partial list
// with 200), and a bound off by one (exactly MaxListLimit items refused).
func TestListWholeOrRefused(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxListLimit = 100 })
	ts.putMany("k/%05d", 100)
	ts.put("k/deleted", "x")
	ts.doJSON(http.MethodDelete, api.PathKV+"k/deleted", nil, http.StatusOK, nil)
	for _, q := range []url.Values{{}, {"limit": {"0"}}} {
		page := ts.listPage("k/", q)
		if len(page.Items) != 100 || page.Continue != "" || page.RemainingItemCount != nil {
			t.Fatalf("whole list %v: %d items, continue %v; want all 100 and no token", q, len(page.Items), page.Continue != "")
		}
	}
	ts.put("k/extra", "x")
	e := ts.expectError(http.MethodGet, "/v1/kv/k/?list=true", nil, http.StatusRequestEntityTooLarge, api.ReasonListTooLarge)
	if !strings.Contains(e.Message, "100 items") || !strings.Contains(e.Message, "?limit=") {
		t.Errorf("refusal %q does not name the bound and ?limit=", e.Message)
	}
	if items, _, pages, _ := ts.listAll("k/", 40); len(items) != 101 || pages != 3 {
		t.Fatalf("paged: %d items in %d pages, want 101 in 3", len(items), pages)
	}
	for _, q := range []string{"limit=101", "limit=-3", "limit=x", "raw=true", "continue="} {
		ts.expectError(http.MethodGet, "/v1/kv/k/?list=true&"+q, nil, 400, api.ReasonBadRequest)
	}
	ts.listPage("k/", url.Values{"limit": {"100"}})

	big := newTestServer(t, func(c *kv.Config) { c.MaxListBytes = 1000 })
	for i := range 3 {
		big.doJSON(http.MethodPut, fmt.Sprintf("/v1/kv/m/%d", i), bytes.Repeat([]byte("x"), 300), 200, nil)
	}
	e = big.expectError(http.MethodGet, "/v1/kv/m/?list=true", nil, http.StatusRequestEntityTooLarge, api.ReasonListTooLarge)
	if !strings.Contains(e.Message, "1000 bytes") {
		t.Errorf("refusal %q does not name the byte bound", e.Message)
	}
	if items, _, _, _ := big.listAll("m/", 10); len(items) != 3 {
		t.Fatalf("paged: %d items, want 3", len(items))
	}
}

// tryDo sends one request and returns an error unless it is answered 200: for
// goroutines other than the test's, which must not call t.Fatal.
func (ts *testServer) tryDo(method, path, body string) error {
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s = %d %s", method, path, resp.StatusCode, b)
	}
	return nil
}

// TestListPagingConcurrentWrites: a 10,000-key scan with limit 97 returns every key
// exactly once, with its value at the first page's revision, while writers overwrite,
// delete and add keys of the same prefix.
func TestListPagingConcurrentWrites(t *testing.T) {
	ts := newTestServer(t)
	const n, limit = 10000, 97
	ts.putMany("p/%05d", n)

	first := ts.listPage("p/", url.Values{"limit": {strconv.Itoa(limit)}})
	rev := first.Revision
	// The writers report failures instead of failing the test themselves (t.Fatal
	// belongs to the test's goroutine), and are stopped and waited for on every way
	// out of the test, a failed page included.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	writeErrs := make(chan error, 3)
	stopWriters := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
		close(writeErrs)
		for err := range writeErrs {
			t.Errorf("concurrent writer: %v", err)
		}
	})
	defer stopWriters()
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("p/%05d", rand.IntN(n))
				method, path, body := http.MethodPut, "/v1/kv/"+k, "new"
				switch w {
				case 1:
					method, body = http.MethodDelete, ""
				case 2:
					path += "-added"
				}
				if err := ts.tryDo(method, path, body); err != nil {
					writeErrs <- err
					return
				}
				writes.Add(1)
			}
		}(w)
	}
	items := first.Items
	token := first.Continue
	for token != "" {
		page := ts.listPage("p/", url.Values{"limit": {strconv.Itoa(limit)}, "continue": {token}})
		if len(page.Items) > limit || page.Revision != rev {
			t.Fatalf("page: %d items at revision %d; want <= %d at %d", len(page.Items), page.Revision, limit, rev)
		}
		items = append(items, page.Items...)
		token = page.Continue
		time.Sleep(time.Millisecond) // let the writers interleave
	}
	stopWriters()

	if len(items) != n {
		t.Fatalf("scan returned %d keys, want %d", len(items), n)
	}
	for i, kv := range items {
		if want := fmt.Sprintf("p/%05d", i); kv.Key != want || string(kv.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("item %d = %s=%q, want %s=v%d", i, kv.Key, kv.Value, want, i)
		}
	}
	if writes.Load() < 50 || ts.revision() <= rev {
		t.Fatalf("only %d concurrent writes happened; the test proves nothing", writes.Load())
	}
}

// TestListZeroItemPages: over a long run of deleted keys a page may hold zero items
// with a token; the scan still returns every live key once and no page is over limit.
//
//	z/00000 .. z/00099   live
//	z/00100 .. z/05099   deleted (tombstones, not compacted)
//	z/05100 .. z/05199   live
func TestListZeroItemPages(t *testing.T) {
	ts := newTestServer(t)
	ts.putMany("z/%05d", 5200)
	var del api.DeleteResponse
	for i := 100; i < 5100; i += 100 {
		ts.doJSON(http.MethodDelete, fmt.Sprintf("/v1/kv/z/%03d?prefix=true", i/100), nil, http.StatusOK, &del)
	}
	items, _, pages, empty := ts.listAll("z/", 10)
	if len(items) != 200 {
		t.Fatalf("scan returned %d keys over %d pages, want 200", len(items), pages)
	}
	if empty == 0 {
		t.Fatalf("no zero-item page over 5000 deleted keys (%d pages): a page must not walk the whole tombstone run", pages)
	}
	t.Logf("%d pages, %d of them empty with a continue token", pages, empty)
}

// TestListTokenWithNothingAfter pins what a continue token means (docs/api.md): a full
// page carries one whenever the range holds another entry, live at the scan's revision
// or not, so the next page can be empty and final, or 410 after a compaction; only
// the absence of a token says the scan is complete.
//
//	keys:  t/1 t/2 | t/3 (deleted)      limit 2
//	page 1: [t/1 t/2] + token  → page 2: [] no token
func TestListTokenWithNothingAfter(t *testing.T) {
	ts := newTestServer(t)
	ts.put("t/1", "a")
	ts.put("t/2", "b")
	ts.put("t/3", "c")
	ts.doJSON(http.MethodDelete, "/v1/kv/t/3", nil, http.StatusOK, nil)

	first := ts.listPage("t/", url.Values{"limit": {"2"}})
	if len(first.Items) != 2 || first.Continue == "" {
		t.Fatalf("page 1 = %d items, continue %q; want 2 items and a token (t/3 is still an entry)", len(first.Items), first.Continue)
	}
	second := ts.listPage("t/", url.Values{"limit": {"2"}, "continue": {first.Continue}})
	if len(second.Items) != 0 || second.Continue != "" {
		t.Fatalf("page 2 = %+v, want empty and final", second)
	}
	// Exactly the live keys and nothing after: no token.
	if p := ts.listPage("t/", url.Values{"limit": {"3"}}); len(p.Items) != 2 || p.Continue != "" {
		t.Fatalf("limit 3 = %d items, continue %q; want 2 items and no token", len(p.Items), p.Continue)
	}
	// The same token after its revision is compacted: 410, although no key was left.
	ts.put("other", "x")
	ts.doJSON(http.MethodPost, "/v1/compact", []byte(fmt.Sprintf(`{"revision":%d}`, ts.revision())), http.StatusOK, nil)
	q := url.Values{"list": {"true"}, "limit": {"2"}, "continue": {first.Continue}}
	ts.expectError(http.MethodGet, "/v1/kv/t/?"+q.Encode(), nil, http.StatusGone, api.ReasonResourceExpired)
}

// TestListTokenTampered: flipping any byte of a token, or garbling it, is a 400.
func TestListTokenTampered(t *testing.T) {
	ts := newTestServer(t)
	ts.putMany("t/%03d", 30)
	page := ts.listPage("t/", url.Values{"limit": {"10"}})
	raw, err := base64.RawURLEncoding.DecodeString(page.Continue)
	if err != nil {
		t.Fatalf("token is not base64url: %v", err)
	}
	for i := range raw {
		bad := bytes.Clone(raw)
		bad[i] ^= 0xff
		q := url.Values{"list": {"true"}, "limit": {"10"}, "continue": {base64.RawURLEncoding.EncodeToString(bad)}}
		ts.expectError(http.MethodGet, "/v1/kv/t/?"+q.Encode(), nil, 400, api.ReasonInvalidContinueToken)
	}
	for _, tok := range []string{"x", "!!!!", "AQ", page.Continue[:len(page.Continue)-1], page.Continue + "A", page.Continue + "=="} {
		q := url.Values{"list": {"true"}, "continue": {tok}}
		ts.expectError(http.MethodGet, "/v1/kv/t/?"+q.Encode(), nil, 400, api.ReasonInvalidContinueToken)
	}
	// The untouched token still works.
	if next := ts.listPage("t/", url.Values{"limit": {"10"}, "continue": {page.Continue}}); len(next.Items) != 10 {
		t.Fatalf("genuine token: %d items, want 10", len(next.Items))
	}
}

// TestListTokenMisuse: a token is valid only with the cluster secret, range and
// revision it was issued for.
func TestListTokenMisuse(t *testing.T) {
	ts := newTestServer(t)
	other := newTestServerOn(t, kvtest.NewWithSecret([]byte("another cluster's secret........")))
	for _, s := range []*testServer{ts, other} {
		s.putMany("a/%03d", 30)
		s.putMany("b/%03d", 30)
	}
	tok := ts.listPage("a/", url.Values{"limit": {"10"}})
	foreign := other.listPage("a/", url.Values{"limit": {"10"}})
	rev := strconv.FormatInt(tok.Revision, 10)
	tests := []struct {
		prefix, token, extra string
		reason               string
	}{
		{"a/", foreign.Continue, "", api.ReasonInvalidContinueToken},
		{"b/", tok.Continue, "", api.ReasonInvalidContinueToken},
		{"", tok.Continue, "", api.ReasonInvalidContinueToken},
		{"a", tok.Continue, "", api.ReasonInvalidContinueToken},
		{"a/0", tok.Continue, "", api.ReasonInvalidContinueToken},
		{"a/", tok.Continue, "&revision=" + strconv.FormatInt(tok.Revision-1, 10), api.ReasonBadRequest},
	}
	for i, tt := range tests {
		path := "/v1/kv/" + tt.prefix + "?list=true&continue=" + url.QueryEscape(tt.token) + tt.extra
		if e := ts.expectError(http.MethodGet, path, nil, 400, tt.reason); e.Message == "" {
			t.Errorf("#%d: empty message", i)
		}
	}
	ok := ts.listPage("a/", url.Values{"continue": {tok.Continue}, "revision": {rev}})
	if len(ok.Items) != 20 || ok.Revision != tok.Revision {
		t.Fatalf("token with its own revision: %d items at %d, want 20 at %d", len(ok.Items), ok.Revision, tok.Revision)
	}
}

// TestListCompactedMidScan: compaction past the scan's revision turns the next page
// into a 410 whose inconsistent continue token resumes from the same key at the
// latest revision and finishes the scan.
func TestListCompactedMidScan(t *testing.T) {
	ts := newTestServer(t)
	ts.putMany("c/%03d", 300)
	page := ts.listPage("c/", url.Values{"limit": {"50"}})
	rev := page.Revision
	seen := map[string]bool{}
	for _, kv := range page.Items {
		seen[kv.Key] = true
	}
	ts.put("c/000", "rewritten") // before the resume point: must not come back
	ts.put("c/200", "rewritten")
	ts.doJSON(http.MethodDelete, "/v1/kv/c/1?prefix=true", nil, http.StatusOK, nil) // c/100..c/199
	ts.put("c/250-added", "new")
	latest := ts.revision()
	var compact api.CompactResponse
	ts.doJSON(http.MethodPost, "/v1/compact", []byte(fmt.Sprintf(`{"revision":%d}`, latest)), http.StatusOK, &compact)
	if compact.CompactRevision != latest {
		t.Fatalf("compact = %+v, want compact revision %d", compact, latest)
	}

	q := url.Values{"list": {"true"}, "limit": {"50"}, "continue": {page.Continue}}
	e := ts.expectError(http.MethodGet, "/v1/kv/c/?"+q.Encode(), nil, http.StatusGone, api.ReasonResourceExpired)
	if e.Continue == "" {
		t.Fatalf("410 without an inconsistent continue token: %+v", e)
	}
	// An inconsistent token has no revision to agree with.
	q = url.Values{"list": {"true"}, "continue": {e.Continue}, "revision": {strconv.FormatInt(rev, 10)}}
	ts.expectError(http.MethodGet, "/v1/kv/c/?"+q.Encode(), nil, 400, api.ReasonBadRequest)

	token := e.Continue
	for token != "" {
		p := ts.listPage("c/", url.Values{"limit": {"50"}, "continue": {token}})
		if p.Revision != latest {
			t.Fatalf("resumed page at revision %d, want the latest %d", p.Revision, latest)
		}
		for _, kv := range p.Items {
			if seen[kv.Key] {
				t.Fatalf("key %q served twice", kv.Key)
			}
			seen[kv.Key] = true
		}
		token = p.Continue
	}
	// 300 original - 100 deleted (none of which was on page 1) + 1 added.
	if len(seen) != 201 || !seen["c/250-added"] || seen["c/150"] {
		t.Fatalf("scan saw %d keys (added %v, deleted c/150 %v), want 201", len(seen), seen["c/250-added"], seen["c/150"])
	}
}

func TestListExplicitRevisionCompacted(t *testing.T) {
	ts := newTestServer(t)
	ts.putMany("e/%02d", 20)
	old := ts.revision()
	ts.put("e/x", "y")
	ts.doJSON(http.MethodPost, "/v1/compact", []byte(fmt.Sprintf(`{"revision":%d}`, ts.revision())), 200, nil)
	e := ts.expectError(http.MethodGet, fmt.Sprintf("/v1/kv/e/?list=true&revision=%d", old), nil, 410, api.ReasonResourceExpired)
	p := ts.listPage("e/", url.Values{"continue": {e.Continue}})
	if len(p.Items) != 21 || p.Continue != "" {
		t.Fatalf("inconsistent restart from the beginning: %d items, want 21", len(p.Items))
	}
	ts.expectError(http.MethodGet, fmt.Sprintf("/v1/kv/e/x?revision=%d", old), nil, 410, api.ReasonResourceExpired)
}

// TestListMaxBytes: a page of big values ends early with a token, never empty.
func TestListMaxBytes(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxListBytes = 1000 })
	big := bytes.Repeat([]byte("x"), 300)
	for i := 0; i < 10; i++ {
		ts.doJSON(http.MethodPut, fmt.Sprintf("/v1/kv/m/%d", i), big, 200, nil)
	}
	items, _, pages, empty := ts.listAll("m/", 100)
	if len(items) != 10 || pages < 4 || empty != 0 {
		t.Fatalf("%d items over %d pages (%d empty); want 10 over >= 4 pages, none empty", len(items), pages, empty)
	}
}

// TestListWithoutSecret: a scan that fits one page needs no secret; one that needs a
// token answers 503 until the cluster secret is applied.
func TestListWithoutSecret(t *testing.T) {
	store := kvtest.NewWithSecret(nil)
	ts := newTestServerOn(t, store, func(c *kv.Config) { c.SecretWait = 20 * time.Millisecond })
	ts.putMany("s/%02d", 20)
	if p := ts.listPage("s/", url.Values{}); len(p.Items) != 20 {
		t.Fatalf("single page: %d items, want 20", len(p.Items))
	}
	ts.expectError(http.MethodGet, "/v1/kv/s/?list=true&limit=5", nil, 503, api.ReasonUnavailable)
	store.SetSecret(kvtest.Secret)
	if p := ts.listPage("s/", url.Values{"limit": {"5"}}); p.Continue == "" {
		t.Fatal("no token once the secret is known")
	}
}

// TestListBinary: a list asked for in the binary encoding carries exactly the JSON
// page: same items, revision and continue token; errors stay JSON.
func TestListBinary(t *testing.T) {
	ts := newTestServer(t)
	ts.putMany("b/%04d", 30)
	get := func(accept string, q string) (int, []byte, http.Header) {
		req, _ := http.NewRequest(http.MethodGet, ts.url+api.PathKV+"b/?list=true&limit=7"+q, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}
	code, jb, _ := get("application/json", "")
	var want api.ListResponse
	if code != 200 || json.Unmarshal(jb, &want) != nil {
		t.Fatalf("json page: %d %s", code, jb)
	}
	code, bb, h := get(api.ContentTypeBinaryList, "")
	if code != 200 || h.Get("Content-Type") != api.ContentTypeBinaryList {
		t.Fatalf("binary page: %d %q", code, h.Get("Content-Type"))
	}
	got, err := api.DecodeBinaryList(bb)
	if err != nil {
		t.Fatal(err)
	}
	// The JSON page counts the rest (exact, on every page with a continue token); the
	// binary encoding does not carry the count, so it is the one field that differs.
	if want.RemainingItemCount == nil || *want.RemainingItemCount != 23 {
		t.Fatalf("json page: remainingItemCount %v, want 23", want.RemainingItemCount)
	}
	want.RemainingItemCount = nil
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("binary page %+v\n!= json page %+v", got, want)
	}
	if len(bb) >= len(jb) {
		t.Errorf("binary page is %d bytes, JSON %d", len(bb), len(jb))
	}
	code, eb, h := get(api.ContentTypeBinaryList, "&continue=garbage")
	if code != http.StatusBadRequest || h.Get("Content-Type") != "application/json" {
		t.Fatalf("bad token in binary mode: %d %q %s", code, h.Get("Content-Type"), eb)
	}
}
