package httpapi

import (
	"net/http"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestBootstrapFloodCostsNoRaftEntry: once bootstrapped, a tokenless bootstrap is
// refused (409) before Raft: a flood of them adds no log entry (kills: the pre-check
// removed, every refusal then an applied, failed transaction).
func TestBootstrapFloodCostsNoRaftEntry(t *testing.T) {
	as := newACLServer(t)
	before := as.store.Status().LastLogIndex
	for i := 0; i < 50; i++ {
		code, b := as.doAs("", http.MethodPost, api.PathACLBootstrap, nil)
		if code != http.StatusConflict {
			t.Fatalf("#%d: bootstrap = %d %s, want 409", i, code, b)
		}
	}
	if after := as.store.Status().LastLogIndex; after != before {
		t.Errorf("50 refused bootstraps moved the log from index %d to %d, want no entry", before, after)
	}
}
