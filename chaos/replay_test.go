package chaos

import (
	"regexp"
	"strings"
	"testing"
)

// TestReplayCommand: the replay command's -run pattern picks the one run it names, not
// a run of another test whose name starts the same, nor a scenario whose name does.
func TestReplayCommand(t *testing.T) {
	cmd := ReplayCommand("TestChaos/pause", 42)
	if !strings.HasPrefix(cmd, "KEEL_CHAOS_SEED=42 ") || !strings.Contains(cmd, "-run '^TestChaos$/^pause$'") {
		t.Fatalf("replay command %q", cmd)
	}
	levels := strings.Split(strings.Split(cmd, "'")[1], "/")
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"TestChaos/pause", true}, {"TestChaosDocker/pause", false}, {"TestChaosTLS/pause", false},
		{"TestChaos/pause-leader", false},
	} {
		names := strings.Split(tc.name, "/")
		got := true
		for i, l := range levels {
			got = got && regexp.MustCompile(l).MatchString(names[i])
		}
		if got != tc.want {
			t.Errorf("-run %q matches %s: %t, want %t", strings.Join(levels, "/"), tc.name, got, tc.want)
		}
	}
}
