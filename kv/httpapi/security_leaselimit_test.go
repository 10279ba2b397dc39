package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// TestLeaseBoundsPerTokenAndCluster: one write token holds at most MaxLeasesPerToken
// live leases (429 TooManyLeases before Raft; a revoked one frees its slot), and the
// cluster at most MaxLeases whoever asks. Kills: grantLease without reserveLease, a
// per-token count that never forgets a revoked lease.
func TestLeaseBoundsPerTokenAndCluster(t *testing.T) {
	as := newACLServer(t, func(c *kv.Config) { c.MaxLeasesPerToken, c.MaxLeases = 3, 5 })
	a := as.tokenFor("a-write", "a/", api.AccessWrite)
	b := as.tokenFor("b-write", "b/", api.AccessWrite)
	grant := func(secret string) (int, int64, string) {
		code, body := as.doAs(secret, http.MethodPost, api.PathLeases, []byte(`{"ttl":60}`))
		var g api.LeaseGrantResponse
		var e api.Error
		json.Unmarshal(body, &g)
		json.Unmarshal(body, &e)
		return code, g.ID, e.Reason
	}
	var first int64
	for i := range 3 {
		code, id, _ := grant(a)
		if code != http.StatusOK {
			t.Fatalf("grant %d of token a = %d", i, code)
		}
		if first == 0 {
			first = id
		}
	}
	if code, _, reason := grant(a); code != http.StatusTooManyRequests || reason != api.ReasonTooManyLeases {
		t.Fatalf("a's 4th lease = %d %s, want 429 %s", code, reason, api.ReasonTooManyLeases)
	}
	if n := as.store.FSM().View().LeaseCount(); n != 3 {
		t.Fatalf("the store holds %d leases after the refusal, want 3", n)
	}
	as.mustAs(a, http.MethodDelete, api.PathLeases+"/"+strconv.FormatInt(first, 10), nil, http.StatusOK, nil)
	if code, _, _ := grant(a); code != http.StatusOK {
		t.Fatalf("a's grant after a revoke = %d, want 200", code)
	}
	for i := range 2 {
		if code, _, _ := grant(b); code != http.StatusOK {
			t.Fatalf("grant %d of token b = %d", i, code)
		}
	}
	if code, _, reason := grant(b); code != http.StatusTooManyRequests || reason != api.ReasonTooManyLeases {
		t.Fatalf("the cluster's 6th lease = %d %s, want 429 %s", code, reason, api.ReasonTooManyLeases)
	}
}
