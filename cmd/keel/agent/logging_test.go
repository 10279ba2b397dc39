package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/internal/logging"
)

// lockedBuffer is the log output of several nodes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestRoutineEventsStayOutOfError: a voluntary leadership transfer, a follower down
// for three seconds and a clean stop of every node log nothing at ERROR (issue #38:
// "failed to heartbeat" hundreds of times, "peer has newer term", "transport
// shutdown"), and every JSON line carries node and component.
func TestRoutineEventsStayOutOfError(t *testing.T) {
	var out lockedBuffer
	c := newTestClusterWith(t, 3, nil, func(cfg *Config) {
		l, err := logging.New(logging.Options{Name: "keel", Level: hclog.Info, Format: logging.FormatJSON, Output: &out})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Logger = l
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.transferLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	down := (c.leader() + 1) % 3
	c.stop(down)
	time.Sleep(3 * time.Second) // 30 heartbeats the leader cannot deliver
	for i := range c.agents {
		c.stop(i)
	}
	heartbeats := 0
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		if m["@level"] == "error" {
			t.Errorf("ERROR line: %s", l)
		}
		if m["node"] == nil || m["component"] == nil {
			t.Errorf("line without node or component: %s", l)
		}
		if m["@message"] == "failed to heartbeat to" {
			heartbeats++
		}
	}
	if heartbeats > 2 {
		t.Errorf("%d \"failed to heartbeat to\" lines for one peer down 3 s, want at most 2 (one per peer per window)", heartbeats)
	}
	if t.Failed() {
		t.Logf("log:\n%s", out.String())
	}
}
