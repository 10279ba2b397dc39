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

// TestReachableAddr: a member listening on every interface announces the host of its
// Raft advertise address (a container's 0.0.0.0:7370 as n1:7370), anything else as is.
func TestReachableAddr(t *testing.T) {
	for i, tc := range []struct{ listen, raft, want string }{
		{"0.0.0.0:7370", "n1:7371", "n1:7370"},
		{"[::]:7370", "10.0.0.1:7371", "10.0.0.1:7370"},
		{"[::]:2379", "[fd00::1]:7371", "[fd00::1]:2379"},
		{"127.0.0.1:7370", "n1:7371", "127.0.0.1:7370"},
		{"10.0.0.2:7370", "10.0.0.1:7371", "10.0.0.2:7370"},
	} {
		if got := reachableAddr(tc.listen, tc.raft); got != tc.want {
			t.Errorf("#%d: reachableAddr(%q, %q) = %q, want %q", i, tc.listen, tc.raft, got, tc.want)
		}
	}
}
