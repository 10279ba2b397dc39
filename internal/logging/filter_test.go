package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
)

// lines decodes the JSON lines of buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func newJSON(t *testing.T, level hclog.Level) (*filter, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	l, err := New(Options{Name: "keel", Level: level, Format: FormatJSON, Output: &buf})
	if err != nil {
		t.Fatal(err)
	}
	return l.(*filter), &buf
}

// TestJSONFields: every line of a named logger carries node and component once; a
// deeper name makes a dotted component.
func TestJSONFields(t *testing.T) {
	root, buf := newJSON(t, hclog.Info)
	node := root.With("node", "n1")
	node.Info("started")
	node.Named("raft").Info("leader elected")
	node.Named("raft").Named("transport").Info("listening")
	got := lines(t, buf)
	want := []struct{ component, module string }{{"", "keel"}, {"raft", "keel.raft"}, {"raft.transport", "keel.raft.transport"}}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %s", len(got), len(want), buf)
	}
	for i, w := range want {
		if got[i]["node"] != "n1" {
			t.Errorf("#%d: node = %v, want n1", i, got[i]["node"])
		}
		if c, _ := got[i]["component"].(string); c != w.component {
			t.Errorf("#%d: component = %q, want %q", i, c, w.component)
		}
		if got[i]["@module"] != w.module {
			t.Errorf("#%d: @module = %v, want %s", i, got[i]["@module"], w.module)
		}
	}
	if n := strings.Count(buf.String(), `"component"`); n != 2 {
		t.Errorf("component appears %d times, want 2 (once per named line): %s", n, buf)
	}
}

// TestRoutineEvents: hashicorp/raft's routine ERROR lines land at the table's level;
// others stay ERROR.
//
//	msg                                  error              → level
//	failed to heartbeat to               connection refused → WARN
//	peer has newer term, stopping ...    -                  → INFO
//	failed to appendEntries to           transport shutdown → DEBUG (hidden at INFO)
//	failed to accept connection          transport shutdown → DEBUG (hidden at INFO)
//	failed to commit logs                disk full          → ERROR
func TestRoutineEvents(t *testing.T) {
	tests := []struct {
		msg   string
		args  []any
		level string // "" = not logged at INFO
	}{
		{"failed to heartbeat to", []any{"peer", "127.0.0.1:1", "error", errors.New("dial tcp: connection refused")}, "warn"},
		{"peer has newer term, stopping replication", []any{"peer", "n2"}, "info"},
		{"failed to appendEntries to", []any{"peer", "n2", "error", hraft.ErrTransportShutdown}, ""},
		{"failed to accept connection", []any{"error", fmt.Errorf("accept: %w", hraft.ErrTransportShutdown)}, ""},
		{"failed to commit logs", []any{"error", errors.New("disk full")}, "error"},
	}
	for i, tt := range tests {
		l, buf := newJSON(t, hclog.Info)
		l.Named("raft").Error(tt.msg, tt.args...)
		got := lines(t, buf)
		switch {
		case tt.level == "" && len(got) != 0:
			t.Errorf("#%d %q: logged %v, want nothing at INFO", i, tt.msg, got)
		case tt.level != "" && (len(got) != 1 || got[0]["@level"] != tt.level):
			t.Errorf("#%d %q: got %v, want one line at %s", i, tt.msg, got, tt.level)
		}
	}
}

// TestRepeatedHeartbeatFailures: a peer down for a minute makes raft log "failed to
// heartbeat to" ten times a second; the filter lets one through per window per peer,
// the next carrying the count of those held back.
func TestRepeatedHeartbeatFailures(t *testing.T) {
	l, buf := newJSON(t, hclog.Info)
	now := time.Unix(1000, 0)
	l.lim.now = func() time.Time { return now }
	log := l.Named("raft")
	fail := func(peer string) {
		log.Error("failed to heartbeat to", "peer", peer, "backoff time", "10ms", "error", errors.New("connection refused"))
	}
	for range 287 { // 28.7 s at 10 a second: within one window
		fail("n2")
		now = now.Add(100 * time.Millisecond)
	}
	fail("n3") // another peer has its own window
	now = now.Add(DefaultRepeatWindow)
	fail("n2")
	got := lines(t, buf)
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3: %s", len(got), buf)
	}
	for i, want := range []struct {
		peer     string
		repeated any
	}{{"n2", nil}, {"n3", nil}, {"n2", float64(286)}} {
		if got[i]["peer"] != want.peer || got[i]["repeated"] != want.repeated || got[i]["@level"] != "warn" {
			t.Errorf("#%d: peer %v repeated %v level %v, want %s %v warn", i, got[i]["peer"], got[i]["repeated"],
				got[i]["@level"], want.peer, want.repeated)
		}
	}
}

func TestCheckFormat(t *testing.T) {
	for _, f := range []string{"", "text", "json"} {
		if err := CheckFormat(f); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
	if err := CheckFormat("yaml"); !errors.Is(err, ErrFormat) {
		t.Errorf("yaml: %v, want ErrFormat", err)
	}
}

// TestFilterIdempotent: filtering twice does not filter twice.
func TestFilterIdempotent(t *testing.T) {
	l := Filter(hclog.NewNullLogger())
	if Filter(l) != l {
		t.Error("Filter(Filter(l)) is a new logger")
	}
}

// TestStandardLogger: memberlist's lines (a standard library logger with inferred
// levels) go through the filter: a down member's failed probes are WARN once per
// window with a count, other lines keep their level, and component is set.
func TestStandardLogger(t *testing.T) {
	l, buf := newJSON(t, hclog.Info)
	now := time.Unix(1000, 0)
	l.lim.now = func() time.Time { return now }
	std := l.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	for range 5 {
		std.Printf("[ERR] memberlist: Failed fallback TCP ping: g2 dial tcp 127.0.0.1:1: connection refused")
		now = now.Add(time.Second)
	}
	std.Printf("[INFO] memberlist: Marking g2 as failed, suspect timeout reached (0 peer confirmations)")
	std.Printf("[ERR] memberlist: Decrypt packet failed: bad key")
	now = now.Add(DefaultRepeatWindow)
	std.Printf("[ERR] memberlist: Failed fallback TCP ping: g2 dial tcp 127.0.0.1:1: connection refused")
	got := lines(t, buf)
	want := []struct {
		level, prefix string
		repeated      any
	}{
		{"warn", "memberlist: Failed fallback TCP ping", nil},
		{"info", "memberlist: Marking g2 as failed", nil},
		{"error", "memberlist: Decrypt packet failed", nil},
		{"warn", "memberlist: Failed fallback TCP ping", float64(4)},
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %s", len(got), len(want), buf)
	}
	for i, w := range want {
		msg, _ := got[i]["@message"].(string)
		if got[i]["@level"] != w.level || !strings.HasPrefix(msg, w.prefix) || got[i]["repeated"] != w.repeated ||
			got[i]["component"] != "memberlist" {
			t.Errorf("#%d: %v, want level %s, message %q..., repeated %v, component memberlist", i, got[i], w.level, w.prefix, w.repeated)
		}
	}
}
