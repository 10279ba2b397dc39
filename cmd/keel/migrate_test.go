package main

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keel-kv/keel/kv/api"
)

// TestProgressLine: every line of `keel migrate status --watch` fits 80 columns, with
// the largest figures, and says what a person needs.
func TestProgressLine(t *testing.T) {
	for i, tc := range []struct {
		st   api.MigrationStatus
		want string
	}{
		{api.MigrationStatus{Resource: "apps/widgets", State: api.MigrationRunning, PassScanned: 4500, Total: 10000,
			ObjectsPerSecond: 512, ETASeconds: 10.7}, "apps/widgets       [#########...........]  45% 4.5k/10k 512/s ETA 11s"},
		{api.MigrationStatus{Resource: "a-very-long-group.example.com/gadgets", State: api.MigrationRunning,
			PassScanned: 987_654_321, Total: 999_999_999, ObjectsPerSecond: 99_999, ETASeconds: 99999}, "ETA 27h46m"},
		// The ETA counts from when the record was written; no rate measured yet is "?".
		{api.MigrationStatus{Resource: "apps/widgets", State: api.MigrationRunning, PassScanned: 600, Total: 1500,
			ObjectsPerSecond: 150, ETASeconds: 6, Updated: time.Now().Add(-2 * time.Second)}, "150/s ETA 4s"},
		{api.MigrationStatus{Resource: "apps/widgets", State: api.MigrationRunning, PassScanned: 20, Total: 1500},
			"1.5k rate ?"},
		{api.MigrationStatus{Resource: "apps/widgets", State: api.MigrationSucceeded, PassScanned: 10, Total: 10},
			"[####################] 100% 10/10 Succeeded"},
		{api.MigrationStatus{Resource: "apps/widgets", State: api.MigrationBlocked, PassScanned: 3, Total: 10,
			Poison: []api.Poison{{Key: "k"}}}, "Blocked: 1 poison"},
	} {
		line := progressLine(&tc.st, progressWidth)
		if n := utf8.RuneCountInString(line); n > 79 {
			t.Errorf("#%d: %d columns: %q", i, n, line)
		}
		if !strings.Contains(line, tc.want) {
			t.Errorf("#%d: %q, want it to contain %q", i, line, tc.want)
		}
	}
}
