package versions

import (
	"strings"
	"testing"
)

// TestCheckDowngrade: `keel upgrade check -schema OLD.yaml` against a cluster that
// migrated to v2. Each case is a report; the v1-only schema (the older release) is
// safe only when nothing is stored — or written — in v2.
//
//	stored (exact tags)  heartbeat            current  → verdict for widgets-v1.yaml
//	v1:4                 v1:4                 v1          ok
//	v2:7                 v2:7                 v2          FAIL: 7 objects in v2
//	v1:4 v2:3            v1:4 (stale)         v1          FAIL: 3 objects in v2 (exact counts win)
//	—                    — (empty)            v2          FAIL: the cluster writes v2
func TestCheckDowngrade(t *testing.T) {
	old, err := LoadSchema("testdata/widgets-v1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	entry := ServerStorageVersion{NodeID: "n1", EncodingVersion: "v2", EffectiveEncodingVersion: "v2",
		DecodableVersions: []string{"v1", "v2"}, ServedVersions: []string{"v1", "v2"}}
	report := func(tags map[string]int64, heartbeat map[string]int64, current string) *Report {
		ss := &StorageState{Resource: "apps/widgets", CurrentEncodingVersion: current, ObjectCounts: heartbeat,
			PersistedEncodingVersions: []string{}}
		for v := range heartbeat {
			ss.PersistedEncodingVersions = append(ss.PersistedEncodingVersions, v)
		}
		return &Report{Resources: []ResourceReport{{Resource: "apps/widgets", StoredObjects: tags, StorageState: ss,
			StorageVersion: &StorageVersion{Resource: "apps/widgets", StorageVersions: []ServerStorageVersion{entry}}}}}
	}
	for i, tc := range []struct {
		rep  *Report
		ok   bool
		want string
	}{
		{report(map[string]int64{"v1": 4}, map[string]int64{"v1": 4}, "v1"), true, "decodes every stored version"},
		{report(map[string]int64{"v2": 7}, map[string]int64{"v2": 7}, "v2"), false, "7 stored object(s) use version v2"},
		{report(map[string]int64{"v1": 4, "v2": 3}, map[string]int64{"v1": 4}, "v1"), false, "3 stored object(s) use version v2"},
		{report(nil, map[string]int64{}, "v2"), false, "the cluster writes version v2 now"},
	} {
		findings := CheckUpgrade(old, tc.rep)
		ok, text := true, ""
		for _, f := range findings {
			ok = ok && f.OK
			text += f.Resource + ": " + f.Message + "\n"
		}
		if ok != tc.ok || !strings.Contains(text, tc.want) || !strings.Contains(text, "apps/widgets") {
			t.Errorf("#%d: ok = %v, findings:\n%s want ok = %v and %q", i, ok, text, tc.ok, tc.want)
		}
	}
}
