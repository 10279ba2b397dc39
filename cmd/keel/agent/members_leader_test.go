package agent

import (
	"errors"
	"testing"
)

// TestStillLeading: `keel members` shows the member Raft names leader as LEADER only
// while gossip has not declared it dead or gone and it answers the applied-index probe;
// a killed leader used to stay LEADER true until the heartbeat timeout.
func TestStillLeading(t *testing.T) {
	refused := errors.New("dial tcp: connection refused")
	for i, tc := range []struct {
		gossip string
		probe  error
		want   bool
	}{
		{"alive", nil, true},
		{"none", nil, true}, // no gossip: the probe decides
		{"suspect", nil, true},
		{"alive", refused, false}, // killed: gossip has not noticed yet
		{"dead", nil, false},
		{"left", nil, false},
	} {
		if got := stillLeading(tc.gossip, tc.probe); got != tc.want {
			t.Errorf("#%d: stillLeading(%q, %v) = %v, want %v", i, tc.gossip, tc.probe, got, tc.want)
		}
	}
}
