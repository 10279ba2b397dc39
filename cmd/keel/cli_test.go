package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv"
)

// startCLINode starts one real node (Raft over loopback) for CLI tests.
func startCLINode(t *testing.T, aclDefault string) string {
	t.Helper()
	cfg := agent.DefaultConfig()
	cfg.DataDir = filepath.Join(t.TempDir(), "n1")
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Raft.BindAddr = freeport.AddrTCPUDP()
	cfg.Raft.Bootstrap = true
	cfg.KV.ACLDefault = aclDefault
	a, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Close(ctx)
	})
	t.Setenv("KEEL_TOKEN", "")
	t.Setenv("KEEL_ADDR", "")
	return a.HTTPAddr()
}

// cliUntil runs a command line until it succeeds (the node elects itself first).
func cliUntil(t *testing.T, args ...string) string {
	t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if out, err = runCLI(t, args...); err == nil {
			return out
		}
	}
	t.Fatalf("%v: %v", args, err)
	return ""
}

// The errors of the first hour say what to do. Each case kills a mutation: the hint,
// the compact revision, the member check, the 1s floor, the stripped package prefix.
func TestCLIErrorsSayWhatToDo(t *testing.T) {
	addr := startCLINode(t, kv.ACLAllow)
	for i := 1; i <= 3; i++ {
		cliUntil(t, "put", "-addr", addr, "k", fmt.Sprint(i))
	}
	if _, err := runCLI(t, "compact", "-addr", addr, "2"); err != nil {
		t.Fatal(err)
	}
	dead := freeport.Addr()
	for _, tc := range []struct {
		args []string
		want []string // in the line printed
		not  string
	}{
		{[]string{"get"}, []string{"keel get KEY: give the key to read"}, "accepts 1 arg"},
		{[]string{"get", "-addr", dead, "-timeout", "3s", "k"}, []string{"-addr", "KEEL_ADDR", dead}, ""},
		{[]string{"compact", "-addr", addr, "1"}, []string{"revision 1 is already compacted: the compact revision is 2"}, "fsm:"},
		{[]string{"transfer-leader", "-addr", addr, "n9"}, []string{"n9 is not a voter"}, "Unavailable"},
		{[]string{"lease", "grant", "-addr", addr, "500ms"}, []string{"at least 1s", "round down to 0s"}, ""},
		{[]string{"get", "-addr", addr, "nope"}, []string{"key not found"}, "fsm:"},
		{[]string{"get", "-addr", addr, "-o", "table", "k"}, []string{`-o "table": want text, json or yaml`}, ""},
	} {
		_, err := runCLI(t, tc.args...)
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		line := errorLine(explain(err))
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%v: %q does not say %q", tc.args, line, w)
			}
		}
		if tc.not != "" && strings.Contains(line, tc.not) {
			t.Errorf("%v: %q still says %q", tc.args, line, tc.not)
		}
	}
	// -addr without a port dials keel's, not 80.
	for in, want := range map[string]string{"localhost": "localhost:7370", "https://n1": "https://n1:7370",
		"[::1]": "[::1]:7370", "n1:9000": "n1:9000", "http://n1:1": "http://n1:1"} {
		if got := withDefaultPort(in); got != want {
			t.Errorf("withDefaultPort(%q) = %q, want %q", in, got, want)
		}
	}
	// keel lock exits with the command's status.
	_, err := runCLI(t, "lock", "-addr", addr, "locks/x", "--", "sh", "-c", "exit 7")
	var child *childExit
	if !errors.As(err, &child) || child.code != 7 {
		t.Errorf("lock -- exit 7 = %v, want the child's status 7", err)
	}
	// A watch from the future says so.
	var note bytes.Buffer
	global.addr = addr
	c, err := newClient()
	if err != nil {
		t.Fatal(err)
	}
	noteFutureRevision(context.Background(), c, &note, 1000)
	if !strings.Contains(note.String(), "revision 1000 is in the future: the current revision is") {
		t.Errorf("future watch note = %q", note.String())
	}
}

// Every -o format is what it says: YAML, a JSON line per scanned key, JSON for
// version and top.
func TestCLIOutputFormats(t *testing.T) {
	addr := startCLINode(t, kv.ACLAllow)
	cliUntil(t, "put", "-addr", addr, "app/a", "1")
	cliUntil(t, "put", "-addr", addr, "app/b", "2")
	out, err := runCLI(t, "get", "-addr", addr, "-o", "yaml", "app/a")
	if err != nil || !strings.Contains(out, "key: app/a\n") || strings.Contains(out, "{") {
		t.Errorf("get -o yaml = %q, %v", out, err)
	}
	out, err = runCLI(t, "get", "-addr", addr, "-o", "json", "--prefix", "app/")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 {
		t.Fatalf("get --prefix -o json = %q, %v: want 2 JSON lines", out, err)
	}
	for _, l := range lines {
		var kv map[string]any
		if err := json.Unmarshal([]byte(l), &kv); err != nil || kv["key"] == nil {
			t.Errorf("line %q: %v", l, err)
		}
	}
	out, err = runCLI(t, "version", "-o", "json")
	var v versionInfo
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Release == "" || v.MaxCommandFormat == 0 {
		t.Errorf("version -o json = %q, %v", out, err)
	}
}

// keel top reads /metrics with the CLI's token: on a cluster with ACLs enforced it is
// not blind (kills: scrapeOptions without the token).
func TestTopUsesTheToken(t *testing.T) {
	addr := startCLINode(t, kv.ACLDeny)
	out := cliUntil(t, "acl", "bootstrap", "-addr", addr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Setenv("KEEL_TOKEN", lines[len(lines)-1])
	cliUntil(t, "put", "-addr", addr, "k", "v")
	out, err := runCLI(t, "top", "-addr", addr, "--once", "-o", "json")
	if err != nil {
		t.Fatalf("top: %v\n%s", err, out)
	}
	var f topJSON
	if err := json.Unmarshal([]byte(out), &f); err != nil || len(f.Members) != 1 {
		t.Fatalf("top -o json = %q: %v", out, err)
	}
	if m := f.Members[0]; m.ScrapeError != "" || m.WritesPerSec == nil {
		t.Errorf("top could not read /metrics: %+v", m)
	}
}

func TestConfirmRestore(t *testing.T) {
	if err := confirmRestore(strings.NewReader(""), &bytes.Buffer{}, false, false, "f"); !errors.Is(err, errRestoreUnconfirmed) {
		t.Errorf("no terminal, no --yes = %v, want a refusal", err)
	}
	if err := confirmRestore(strings.NewReader(""), &bytes.Buffer{}, false, true, "f"); err != nil {
		t.Errorf("--yes = %v", err)
	}
	var asked bytes.Buffer
	if err := confirmRestore(strings.NewReader("y\n"), &asked, true, false, "f"); err != nil || !strings.Contains(asked.String(), "[y/N]") {
		t.Errorf("terminal, y = %v (asked %q)", err, asked.String())
	}
	if err := confirmRestore(strings.NewReader("\n"), &bytes.Buffer{}, true, false, "f"); err == nil {
		t.Error("terminal, empty answer: restored")
	}
}

// TestDialHintFitsTheCluster: when no node answers, "start one (make run)" is the
// hint for a dev setup only; against a secured cluster (https, a token) the hint says
// to check the node and the address instead.
func TestDialHintFitsTheCluster(t *testing.T) {
	t.Setenv("KEEL_TOKEN", "")
	dead := freeport.Addr()
	for _, tc := range []struct {
		args    []string
		makeRun bool
		mustSay string
	}{
		{[]string{"get", "-addr", dead, "k"}, true, "KEEL_ADDR"},
		{[]string{"get", "-addr", "https://" + dead, "k"}, false, "is the node running?"},
		{[]string{"get", "-addr", dead, "-token", "s3cret", "k"}, false, "is the node running?"},
	} {
		_, err := runCLI(t, append(tc.args, "-timeout", "3s")...)
		if err == nil {
			t.Fatalf("%v: no error", tc.args)
		}
		line := errorLine(explain(err))
		if strings.Contains(line, "make run") != tc.makeRun || !strings.Contains(line, tc.mustSay) {
			t.Errorf("%v: %q: want make run mentioned = %v, and %q", tc.args, line, tc.makeRun, tc.mustSay)
		}
	}
}

// TestHealth: `keel health` exits 0 for a live node and 1 for none, at once (one
// request, no retry: a health check's timeout is short); --ready lists the checks.
func TestHealth(t *testing.T) {
	addr := startCLINode(t, kv.ACLDeny) // health needs no token
	if out, err := runCLI(t, "health", "-addr", addr); err != nil || !strings.Contains(out, "live") {
		t.Errorf("health of a live node = %v, %q", err, out)
	}
	out := cliUntil(t, "health", "-addr", addr, "--ready")
	if !strings.Contains(out, "[+]leader ok") {
		t.Errorf("health --ready = %q, want the checks", out)
	}
	start := time.Now()
	if _, err := runCLI(t, "health", "-addr", freeport.Addr()); err == nil || exitCode(err) != 1 || time.Since(start) > time.Second {
		t.Errorf("health of no node = %v (exit %d) after %v, want exit 1 at once", err, exitCode(err), time.Since(start))
	}
}
