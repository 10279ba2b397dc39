package resources

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keel-kv/keel/kv"
)

// TestParseListVersionTable: every cell of Kubernetes' "semantics for get and list"
// table (rv unset/"0"/N, and malformed ones, × resourceVersionMatch unset/Exact/
// NotOlderThan/unknown × no paging/limit/continue/both), with the 400s its
// ValidateListOptions and etcd3 store give. Kills: rv=N with limit read as
// NotOlderThan (KEP-2523's pre-match behaviour is Exact), Exact allowed with "0",
// match allowed with continue, and rv=N allowed with continue.
func TestParseListVersionTable(t *testing.T) {
	sems := map[string]kv.ListSemantics{"MR": kv.ListMostRecent, "Any": kv.ListAny, "NOT": kv.ListNotOlderThan, "Ex": kv.ListExact, "C": kv.ListContinue}
	rvs := []string{"", "0", "7", "x", "-1"}
	type paging struct{ limit, cont bool }
	pagings := map[string]paging{"none": {}, "limit": {limit: true}, "continue": {cont: true}, "both": {true, true}}
	table := []struct {
		match, paging string
		want          [5]string // per rvs; "400" = refused
	}{
		{"", "none", [5]string{"MR", "Any", "NOT", "400", "400"}},
		{"", "limit", [5]string{"MR", "Any", "Ex", "400", "400"}},
		{"", "continue", [5]string{"C", "C", "400", "400", "400"}},
		{"", "both", [5]string{"C", "C", "400", "400", "400"}},
		{"Exact", "none", [5]string{"400", "400", "Ex", "400", "400"}},
		{"Exact", "limit", [5]string{"400", "400", "Ex", "400", "400"}},
		{"Exact", "continue", [5]string{"400", "400", "400", "400", "400"}},
		{"Exact", "both", [5]string{"400", "400", "400", "400", "400"}},
		{"NotOlderThan", "none", [5]string{"400", "Any", "NOT", "400", "400"}},
		{"NotOlderThan", "limit", [5]string{"400", "Any", "NOT", "400", "400"}},
		{"NotOlderThan", "continue", [5]string{"400", "400", "400", "400", "400"}},
		{"NotOlderThan", "both", [5]string{"400", "400", "400", "400", "400"}},
		{"exact", "none", [5]string{"400", "400", "400", "400", "400"}},
		{"Newest", "limit", [5]string{"400", "400", "400", "400", "400"}},
	}
	for _, row := range table {
		pg := pagings[row.paging]
		for i, rv := range rvs {
			got, err := parseListVersion(rv, row.match, pg.limit, pg.cont)
			name := fmt.Sprintf("rv=%q match=%q %s", rv, row.match, row.paging)
			if row.want[i] == "400" {
				if !errors.Is(err, kv.ErrInvalidParam) {
					t.Errorf("%s = %+v, %v; want 400", name, got, err)
				}
				continue
			}
			want := kv.ListVersion{Semantics: sems[row.want[i]]}
			if want.Semantics == kv.ListExact || want.Semantics == kv.ListNotOlderThan {
				want.Revision = 7
			}
			if err != nil || got != want {
				t.Errorf("%s = %+v, %v; want %+v (%s)", name, got, err, want, row.want[i])
			}
		}
	}
}
