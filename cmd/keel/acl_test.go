package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/client"
)

// runCLI runs one keel command line in-process and returns its output and error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newCLI()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(normalizeArgs(root, args))
	err := root.Execute()
	return out.String(), err
}

// TestACLCommands drives `keel acl` against a real node started with -acl-default
// deny: bootstrap prints the secret alone on the last line, once; the token works from
// KEEL_TOKEN and -token; a policy and a token made with the CLI grant what they say.
func TestACLCommands(t *testing.T) {
	addr := startCLINode(t, kv.ACLDeny)

	if _, err := runCLI(t, "put", "-addr", addr, "app/x", "1"); !client.IsUnauthorized(err) {
		t.Fatalf("put before bootstrap = %v, want 401", err)
	}
	var out string
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; {
		if out, err = runCLI(t, "acl", "bootstrap", "-addr", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // no leader yet
	}
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	secret := lines[len(lines)-1]
	if !strings.HasPrefix(secret, "keel_") || len(secret) != 48 || strings.Count(out, secret) != 1 {
		t.Fatalf("bootstrap printed %q: want the secret alone on the last line", out)
	}
	if _, err := runCLI(t, "acl", "bootstrap", "-addr", addr); !client.IsAlreadyBootstrapped(err) {
		t.Fatalf("second bootstrap = %v, want 409 AlreadyBootstrapped", err)
	}

	t.Setenv("KEEL_TOKEN", secret)
	if _, err := runCLI(t, "acl", "policy", "put", "app", "-addr", addr, "-write", "app/"); err != nil {
		t.Fatalf("policy put: %v", err)
	}
	out, err = runCLI(t, "acl", "token", "create", "-addr", addr, "-policy", "app", "-description", "app server")
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	app := lines[len(lines)-1]
	if out, err := runCLI(t, "acl", "token", "list", "-addr", addr); err != nil || !strings.Contains(out, "app server") ||
		strings.Contains(out, app) || strings.Contains(out, secret) {
		t.Fatalf("token list = %q, %v; want the app token listed and no secret", out, err)
	}

	t.Setenv("KEEL_TOKEN", "")
	if _, err := runCLI(t, "put", "-addr", addr, "-token", app, "app/x", "1"); err != nil {
		t.Fatalf("put with the app token: %v", err)
	}
	_, err = runCLI(t, "put", "-addr", addr, "-token", app, "other", "1")
	if !client.IsForbidden(err) || !strings.Contains(err.Error(), `no write right on key "other"`) {
		t.Fatalf("put outside the policy = %v, want 403 naming the right", err)
	}
	if strings.Contains(errorLine(err), app) {
		t.Fatalf("the error line holds the token")
	}
}

// TestAgentLimitFlagsRefuseBadValues: a bad connection, request or watch bound is
// refused before the agent writes anything to its data dir.
func TestAgentLimitFlagsRefuseBadValues(t *testing.T) {
	for _, bad := range [][]string{{"-max-in-flight", "0"}, {"-max-conns", "-1"}, {"-max-stream-watches", "-2"}} {
		dir := filepath.Join(t.TempDir(), "data")
		_, err := runCLI(t, append([]string{"agent", "-dev", "-data-dir", dir, "-http-addr", "127.0.0.1:0"}, bad...)...)
		if err == nil || !strings.Contains(err.Error(), "must be >= ") {
			t.Errorf("agent %v = %v, want a refusal naming the bound", bad, err)
		}
		if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
			t.Errorf("agent %v wrote its data dir before refusing (stat: %v)", bad, serr)
		}
	}
}
