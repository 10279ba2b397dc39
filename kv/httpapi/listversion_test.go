package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// typedList is the answer of a typed list, as a test reads it.
type typedList struct {
	Metadata struct {
		Revision           int64
		ResourceVersion    string
		Continue           string
		RemainingItemCount *int64
	}
	Items []map[string]any
}

func (ts *testServer) typedList(q url.Values) typedList {
	ts.t.Helper()
	var l typedList
	ts.doJSON(http.MethodGet, "/apis/apps/v1/widgets?"+q.Encode(), nil, http.StatusOK, &l)
	if l.Metadata.ResourceVersion != strconv.FormatInt(l.Metadata.Revision, 10) {
		ts.t.Fatalf("metadata.resourceVersion %q, revision %d", l.Metadata.ResourceVersion, l.Metadata.Revision)
	}
	return l
}

// TestResourceListVersions: a typed list serves resourceVersion and
// resourceVersionMatch as Kubernetes does, over a store whose history starts at a
// compacted revision: MostRecent and Any at the latest, Exact at N (410 "too old
// resource version" once compacted), NotOlderThan at the latest (also for a compacted
// N), 504 ResourceVersionTooLarge beyond the latest, and a continue token keeps its
// revision. Kills: Exact served at the latest, NotOlderThan refused with 410 for a
// compacted N, a future revision answered 400 or served.
func TestResourceListVersions(t *testing.T) {
	ts := newResourceServer(t)
	put := func(name string, size int) {
		body := objJSON(map[string]any{"spec": map[string]any{"size": size}})
		if code, b, _ := ts.do(http.MethodPut, "/apis/apps/v1/widgets/"+name, body); code/100 != 2 {
			t.Fatalf("put %s: %d %s", name, code, b)
		}
	}
	put("a", 1)
	compacted := ts.revision()
	put("b", 1)
	ts.doJSON(http.MethodPost, "/v1/compact", []byte(fmt.Sprintf(`{"revision":%d}`, ts.revision())), 200, nil)
	mid := ts.revision()
	put("c", 1)
	put("a", 2)
	latest := ts.revision()
	future := strconv.FormatInt(latest+5, 10)
	n := func(r int64) string { return strconv.FormatInt(r, 10) }
	tests := []struct {
		q       string
		rev     int64 // 0: refused
		items   int
		code    int
		reason  string
		message string
	}{
		{q: "", rev: latest, items: 3},
		{q: "resourceVersion=", rev: latest, items: 3},
		{q: "resourceVersion=0", rev: latest, items: 3},
		{q: "resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=5", rev: latest, items: 3},
		{q: "resourceVersion=" + n(mid), rev: latest, items: 3}, // no limit: NotOlderThan
		{q: "resourceVersion=" + n(mid) + "&limit=5", rev: mid, items: 2},
		{q: "resourceVersion=" + n(mid) + "&resourceVersionMatch=Exact", rev: mid, items: 2},
		{q: "resourceVersion=" + n(mid) + "&resourceVersionMatch=NotOlderThan&limit=5", rev: latest, items: 3},
		{q: "resourceVersion=" + n(compacted), rev: latest, items: 3},
		{q: "resourceVersion=" + n(compacted) + "&resourceVersionMatch=NotOlderThan", rev: latest, items: 3},
		{q: "resourceVersion=" + n(compacted) + "&limit=5", code: 410, reason: api.ReasonResourceExpired, message: "too old resource version"},
		{q: "resourceVersion=" + n(compacted) + "&resourceVersionMatch=Exact", code: 410, reason: api.ReasonResourceExpired, message: "too old resource version"},
		{q: "resourceVersion=" + future, code: 504, reason: api.ReasonResourceVersionTooLarge, message: "Too large resource version"},
		{q: "resourceVersion=" + future + "&limit=1", code: 504, reason: api.ReasonResourceVersionTooLarge},
		{q: "resourceVersion=" + future + "&resourceVersionMatch=Exact", code: 504, reason: api.ReasonResourceVersionTooLarge},
		{q: "resourceVersion=" + future + "&resourceVersionMatch=NotOlderThan", code: 504, reason: api.ReasonResourceVersionTooLarge},
		{q: "resourceVersionMatch=Exact", code: 400, reason: api.ReasonBadRequest},
		{q: "resourceVersion=0&resourceVersionMatch=Exact", code: 400, reason: api.ReasonBadRequest},
		{q: "resourceVersion=x", code: 400, reason: api.ReasonBadRequest},
		{q: "resourceVersion=1&resourceVersionMatch=Newest", code: 400, reason: api.ReasonBadRequest},
	}
	for _, tt := range tests {
		q, _ := url.ParseQuery(tt.q)
		if tt.code != 0 {
			e := ts.expectError(http.MethodGet, "/apis/apps/v1/widgets?"+tt.q, nil, tt.code, tt.reason)
			if !strings.Contains(e.Message, tt.message) {
				t.Errorf("%s: message %q, want it to say %q", tt.q, e.Message, tt.message)
			}
			continue
		}
		l := ts.typedList(q)
		if l.Metadata.Revision != tt.rev || len(l.Items) != tt.items {
			t.Errorf("%s: %d items at revision %d, want %d at %d (mid %d, latest %d)",
				tt.q, len(l.Items), l.Metadata.Revision, tt.items, tt.rev, mid, latest)
		}
	}

	// A continue token keeps the first page's revision; rv "0" beside it is ignored,
	// any other rv or a match is refused.
	first := ts.typedList(url.Values{"resourceVersion": {n(mid)}, "limit": {"1"}})
	if first.Metadata.Revision != mid || first.Metadata.Continue == "" {
		t.Fatalf("first exact page: %+v", first.Metadata)
	}
	for _, rv := range []string{"", "0"} {
		next := ts.typedList(url.Values{"continue": {first.Metadata.Continue}, "limit": {"5"}, "resourceVersion": {rv}})
		if next.Metadata.Revision != mid || len(next.Items) != 1 {
			t.Errorf("continue with rv=%q: %d items at %d, want 1 at %d", rv, len(next.Items), next.Metadata.Revision, mid)
		}
	}
	for _, extra := range []string{"resourceVersion=" + n(mid), "resourceVersion=" + n(mid) + "&resourceVersionMatch=Exact",
		"resourceVersion=0&resourceVersionMatch=NotOlderThan"} {
		ts.expectError(http.MethodGet, "/apis/apps/v1/widgets?limit=5&continue="+url.QueryEscape(first.Metadata.Continue)+"&"+extra,
			nil, http.StatusBadRequest, api.ReasonBadRequest)
	}
}

// TestRawListRevisionMatch: the raw list's revision=N is Exact (410 once compacted)
// unless revision_match=not_older_than, which serves the latest revision (also for a
// compacted N) and answers 504 ResourceVersionTooLarge beyond it; revision_match
// needs a revision and no continue. Kills: not_older_than read as exact, and a
// future revision served or answered 400.
func TestRawListRevisionMatch(t *testing.T) {
	ts := newTestServer(t)
	ts.putMany("r/%02d", 3)
	old := ts.revision()
	ts.put("r/x", "y")
	ts.doJSON(http.MethodPost, "/v1/compact", []byte(fmt.Sprintf(`{"revision":%d}`, ts.revision())), 200, nil)
	latest := ts.revision()
	n := func(r int64) string { return strconv.FormatInt(r, 10) }
	for _, q := range []string{"revision=" + n(old) + "&revision_match=not_older_than", "revision=" + n(old) + "&revision_match=not_older_than&limit=2"} {
		v, _ := url.ParseQuery(q)
		if p := ts.listPage("r/", v); p.Revision != latest || (len(p.Items) != 4 && p.Continue == "") {
			t.Errorf("%s: %d items at %d, want the latest %d", q, len(p.Items), p.Revision, latest)
		}
	}
	for _, tt := range []struct {
		q      string
		code   int
		reason string
	}{
		{"revision=" + n(old), 410, api.ReasonResourceExpired},
		{"revision=" + n(old) + "&revision_match=exact", 410, api.ReasonResourceExpired},
		{"revision=" + n(latest+3) + "&revision_match=not_older_than", 504, api.ReasonResourceVersionTooLarge},
		{"revision_match=exact", 400, api.ReasonBadRequest},
		{"revision=" + n(latest) + "&revision_match=newest", 400, api.ReasonBadRequest},
		{"revision=" + n(latest) + "&revision_match=not_older_than&continue=abc", 400, api.ReasonBadRequest},
	} {
		ts.expectError(http.MethodGet, "/v1/kv/r/?list=true&"+tt.q, nil, tt.code, tt.reason)
	}
	ts.expectError(http.MethodGet, "/v1/kv/r/00?revision_match=exact", nil, 400, api.ReasonBadRequest)
}

// TestListRemainingItemCount: remainingItemCount is set, exactly, on every page with a
// continue token, however long the rest (the store counts it from its tree's ranks;
// it used to be absent when the rest was longer than one more page, since counting
// that was O(n)); absent on the last page and on a whole list. Under ACL filtering
// that covers only part of the rest it counts readable keys within one page's
// look-ahead (countRest). Both doors. Kills: counting from the page's start instead of
// its next key, counting deleted keys, and a count at the latest revision instead of
// the scan's.
func TestListRemainingItemCount(t *testing.T) {
	ts := newTestServer(t)
	ts.putMany("c/%02d", 25)
	ts.put("c/zz", "x")
	ts.doJSON(http.MethodDelete, api.PathKV+"c/zz", nil, http.StatusOK, nil)
	var got []string
	token := ""
	for {
		q := url.Values{"limit": {"10"}}
		if token != "" {
			q.Set("continue", token)
		}
		p := ts.listPage("c/", q)
		s := "-"
		if p.RemainingItemCount != nil {
			s = strconv.FormatInt(*p.RemainingItemCount, 10)
		}
		got = append(got, s)
		if token = p.Continue; token == "" {
			break
		}
	}
	if strings.Join(got, ",") != "15,5,-" {
		t.Errorf("remainingItemCount per page = %v, want [15 5 -] (15, 5, last page)", got)
	}
	if p := ts.listPage("c/", url.Values{"limit": {"20"}}); p.RemainingItemCount == nil || *p.RemainingItemCount != 5 {
		t.Errorf("limit 20: remainingItemCount %v, want 5", p.RemainingItemCount)
	}
	// The second page of a scan reads at the first page's revision: keys written
	// since do not count, keys deleted since still do.
	p := ts.listPage("c/", url.Values{"limit": {"10"}})
	ts.put("c/50", "new") // the rest at the latest revision: c/20..c/22, c/50
	ts.doJSON(http.MethodDelete, api.PathKV+"c/23", nil, http.StatusOK, nil)
	ts.doJSON(http.MethodDelete, api.PathKV+"c/24", nil, http.StatusOK, nil)
	if p = ts.listPage("c/", url.Values{"limit": {"10"}, "continue": {p.Continue}}); p.RemainingItemCount == nil || *p.RemainingItemCount != 5 {
		t.Errorf("second page after writes: remainingItemCount %v, want 5 (at the scan's revision)", p.RemainingItemCount)
	}

	rs := newResourceServer(t)
	for i := range 12 {
		body := objJSON(map[string]any{"spec": map[string]any{"size": i}})
		if code, b, _ := rs.do(http.MethodPut, fmt.Sprintf("/apis/apps/v1/widgets/w%02d", i), body); code != http.StatusCreated {
			t.Fatalf("put: %d %s", code, b)
		}
	}
	if l := rs.typedList(url.Values{"limit": {"7"}}); l.Metadata.RemainingItemCount == nil || *l.Metadata.RemainingItemCount != 5 {
		t.Errorf("typed limit 7 of 12: remainingItemCount %v, want 5", l.Metadata.RemainingItemCount)
	}
	if l := rs.typedList(url.Values{"limit": {"3"}}); l.Metadata.RemainingItemCount == nil || *l.Metadata.RemainingItemCount != 9 {
		t.Errorf("typed limit 3 of 12: remainingItemCount %v, want 9 (exact, however long the rest)", l.Metadata.RemainingItemCount)
	}
	if l := rs.typedList(url.Values{}); l.Metadata.RemainingItemCount != nil || len(l.Items) != 12 {
		t.Errorf("typed whole list: %d items, remainingItemCount %v", len(l.Items), l.Metadata.RemainingItemCount)
	}
}

// TestListRemainingItemCountUnderACL: a token whose rules cover the whole range gets
// the exact count from the store, however long the rest; one whose rules cover part
// of it gets the count of the keys it may read, only when the rest fits in one more
// page (they can only be counted by reading them), and none otherwise. Kills: the
// store's count given to a token that may read part of the range (r/x counted).
//
//	keys r/00 .. r/29, r/x      all-r: read r/      part: read r/1, r/2
func TestListRemainingItemCountUnderACL(t *testing.T) {
	as := newACLServer(t)
	for i := range 30 {
		as.mustAs(as.root, http.MethodPut, fmt.Sprintf("%sr/%02d", api.PathKV, i), []byte("v"), http.StatusOK, nil)
	}
	as.mustAs(as.root, http.MethodPut, api.PathKV+"r/x", []byte("v"), http.StatusOK, nil)
	all := as.tokenFor("all-r", "r/", api.AccessRead)
	part := as.tokenFor("part", "r/1", api.AccessRead, "r/2", api.AccessRead)
	for i, c := range []struct {
		secret string
		limit  int
		first  string // the page's first key
		want   string // remainingItemCount, "-" absent
	}{
		{all, 5, "r/00", "26"},
		{part, 5, "r/10", "-"},  // 15 readable keys follow: more than one page
		{part, 11, "r/10", "9"}, // r/21 .. r/29 and r/x fit in one page; r/x is not readable
	} {
		var page api.ListResponse
		as.mustAs(c.secret, http.MethodGet, fmt.Sprintf("%sr/?list=true&limit=%d", api.PathKV, c.limit), nil, http.StatusOK, &page)
		got := "-"
		if page.RemainingItemCount != nil {
			got = strconv.FormatInt(*page.RemainingItemCount, 10)
		}
		if len(page.Items) == 0 || string(page.Items[0].Key) != c.first || got != c.want {
			t.Errorf("#%d: %d items from %v, remainingItemCount %s; want from %s, %s", i, len(page.Items), page.Items, got, c.first, c.want)
		}
	}
}
