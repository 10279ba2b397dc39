package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv/api"
)

// localCommands talk to no node.
var localCommands = []string{"agent", "dev", "tls ca create", "tls cert create", "tls gossip-key", "version", "docs man",
	"snapshot inspect"}

// securedNode starts `keel agent` from the command line with TLS and the default
// flags otherwise (ACLs deny, client certificates not mentioned), in dir, which holds
// keel-ca.pem, n1.pem and ops.pem (a client certificate) and their keys. It returns
// the node's address and a channel that yields the agent's end.
func securedNode(t *testing.T, dir string) (string, <-chan struct{}) {
	t.Helper()
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-node", "n1"},
		{"tls", "cert", "create", "-client", "ops"}} {
		if _, err := runKeel(t, dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	httpAddr := freeport.Addr()
	root := newRootCmd()
	root.SetArgs(normalizeArgs(root, []string{"agent", "-node-id", "n1", "-data-dir", filepath.Join(dir, "data"),
		"-http-addr", httpAddr, "-raft-addr", freeport.Addr(), "-bootstrap", "-log-level", "error",
		"-ca-file", filepath.Join(dir, "keel-ca.pem"), "-cert-file", filepath.Join(dir, "n1.pem"),
		"-key-file", filepath.Join(dir, "n1-key.pem")}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := root.ExecuteContext(ctx); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	return "https://" + httpAddr, done
}

// untilAnswer runs a command line until a node answers it (an API error or success),
// for at most 20 s: the node may still be starting.
func untilAnswer(t *testing.T, args ...string) (string, error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := runCLI(t, args...)
		var e *api.Error
		if err == nil || (errors.As(err, &e) && e.Code != 503) || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTLSNodeRequiresClientCertificates: a node started with TLS and no
// -verify-clients refuses a client without a certificate, so such a client cannot win
// the ACL bootstrap (kills: -verify-clients off by default).
func TestTLSNodeRequiresClientCertificates(t *testing.T) {
	dir := t.TempDir()
	addr, _ := securedNode(t, dir)
	t.Setenv("KEEL_TOKEN", "")
	t.Setenv("KEEL_CERT_FILE", "")
	t.Setenv("KEEL_KEY_FILE", "")
	_, err := untilAnswer(t, "acl", "bootstrap", "-addr", addr, "-ca-file", filepath.Join(dir, "keel-ca.pem"))
	var e *api.Error
	if !errors.As(err, &e) || e.Reason != api.ReasonClientCertRequired {
		t.Fatalf("bootstrap without a client certificate = %v, want 401 %s", err, api.ReasonClientCertRequired)
	}
	if _, err := untilAnswer(t, "acl", "bootstrap", "-addr", addr, "-ca-file", filepath.Join(dir, "keel-ca.pem"),
		"-cert-file", filepath.Join(dir, "ops.pem"), "-key-file", filepath.Join(dir, "ops-key.pem")); err != nil {
		t.Fatalf("bootstrap with a client certificate: %v", err)
	}
}

// cliCase is one command line of TestEveryCommandHonoursTLSAndToken.
type cliCase struct {
	name string // the command's path, as in `keel help`
	args []string
	ok   func(out string, err error) bool // nil: the node answered (success or an API error but 401)
}

// answered reports whether the node served the request: success, or an API error
// other than 401 (a node refusing the certificate or the token). A TLS failure is no
// API error.
func answered(_ string, err error) bool {
	var e *api.Error
	return err == nil || (errors.As(err, &e) && e.Code != 401)
}

// TestEveryCommandHonoursTLSAndToken runs every command that talks to a node against
// a node with TLS, client certificates and ACLs, giving the CA, the client certificate
// and the token by flag to half of them and by environment variable to the other
// half; each must be served. A new command must be added to the table (or to
// localCommands). Kills: `keel schema apply` (and `keel top`'s scrape) building a
// client without the global TLS settings and token.
func TestEveryCommandHonoursTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	addr, done := securedNode(t, dir)
	ca, cert, key := filepath.Join(dir, "keel-ca.pem"), filepath.Join(dir, "ops.pem"), filepath.Join(dir, "ops-key.pem")
	for _, k := range []string{"KEEL_TOKEN", "KEEL_CA_FILE", "KEEL_CERT_FILE", "KEEL_KEY_FILE"} {
		t.Setenv(k, "")
	}
	out, err := untilAnswer(t, "acl", "bootstrap", "-addr", addr, "-ca-file", ca, "-cert-file", cert, "-key-file", key)
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	token := lines[len(lines)-1]
	schema, _ := filepath.Abs("../../docs/examples/widgets-v2.yaml")
	txn := filepath.Join(dir, "txn.json")
	os.WriteFile(txn, []byte(`{"success":[{"type":"put","key":"t","value":"dg=="}]}`), 0o600)
	snap := filepath.Join(dir, "backup.snap")
	// A data dir of a node n9 that is not a member: rebuild asks the node to remove it
	// (not found, fine) and writes the rejoin record.
	gone := filepath.Join(dir, "n9-data")
	os.MkdirAll(gone, 0o700)
	os.WriteFile(filepath.Join(gone, "node-id"), []byte("n9\n"), 0o600)
	cases := []cliCase{
		{"status", []string{"status"}, nil}, {"members", []string{"members"}, nil},
		{"versions", []string{"versions"}, nil}, {"put", []string{"put", "k", "v"}, nil},
		{"watch", []string{"watch", "k", "-revision", "1"}, func(out string, err error) bool {
			return err == nil && strings.Contains(out, "PUT k v")
		}},
		{"get", []string{"get", "k"}, nil}, {"txn", []string{"txn", "-f", txn}, nil},
		{"del", []string{"del", "t"}, nil}, {"compact", []string{"compact", "1"}, nil},
		{"lease grant", []string{"lease", "grant", "30s"}, nil}, {"lease list", []string{"lease", "list"}, nil},
		{"lease keepalive", []string{"lease", "keepalive", "-once", "12345"}, nil},
		{"lease revoke", []string{"lease", "revoke", "12345"}, nil},
		{"lock", []string{"lock", "mylock", "--", "true"}, nil},
		{"top", []string{"top", "-once"}, func(out string, err error) bool {
			return err == nil && !strings.Contains(out, "certificate") && !strings.Contains(out, "401")
		}},
		{"schema apply", []string{"schema", "apply", schema}, nil},
		{"upgrade check", []string{"upgrade", "check", "-schema", schema}, orUnsafe},
		{"snapshot save", []string{"snapshot", "save", snap}, nil},
		{"snapshot restore", []string{"snapshot", "restore", "--yes", snap}, nil},
		{"rebuild", []string{"rebuild", "-data-dir", gone}, nil},
		{"migrate status", []string{"migrate", "status"}, nil}, {"migrate settings", []string{"migrate", "settings"}, nil},
		{"migrate start", []string{"migrate", "start", "apps/widgets"}, nil},
		{"migrate abort", []string{"migrate", "abort", "apps/widgets"}, nil},
		{"keymigrate status", []string{"keymigrate", "status"}, nil},
		{"keymigrate advance", []string{"keymigrate", "advance", "nosuch", "--to", "1"}, nil},
		{"keymigrate rollback", []string{"keymigrate", "rollback", "nosuch", "--to", "0"}, nil},
		{"acl bootstrap", []string{"acl", "bootstrap"}, nil},
		{"acl policy put", []string{"acl", "policy", "put", "p", "-read", "x/"}, nil},
		{"acl policy get", []string{"acl", "policy", "get", "p"}, nil},
		{"acl policy list", []string{"acl", "policy", "list"}, nil},
		{"acl token create", []string{"acl", "token", "create", "-policy", "p"}, nil},
		{"acl token list", []string{"acl", "token", "list"}, nil},
		{"acl token self", []string{"acl", "token", "self"}, nil},
		{"acl token delete", []string{"acl", "token", "delete", "nosuch"}, nil},
		{"acl policy delete", []string{"acl", "policy", "delete", "p"}, nil},
		{"health", []string{"health", "--ready"}, func(out string, err error) bool {
			return err == nil && strings.Contains(out, "readyz check passed")
		}},
		{"remove-peer", []string{"remove-peer", "nosuch"}, nil},
		{"transfer-leader", []string{"transfer-leader"}, nil},
		{"leave", []string{"leave"}, nil}, // last: the node stops
	}
	checkCommandTable(t, cases)
	// keel top scrapes each member's /metrics with a client of its own (members with an
	// HTTP address: gossip only, so not this node's): ask it directly.
	global = globalFlags{caFile: ca, certFile: cert, keyFile: key, token: token}
	opts, err := scrapeOptions()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scrapeNode(context.Background(), addr, opts); err != nil {
		t.Errorf("keel top's scrape: %v", err)
	}
	for i, c := range cases {
		flags := []string{"-addr", addr, "-timeout", "10s"}
		if i%2 == 0 {
			flags = append(flags, "-ca-file", ca, "-cert-file", cert, "-key-file", key, "-token", token)
		} else {
			t.Setenv("KEEL_CA_FILE", ca)
			t.Setenv("KEEL_CERT_FILE", cert)
			t.Setenv("KEEL_KEY_FILE", key)
			t.Setenv("KEEL_TOKEN", token)
		}
		args := slices.Clone(c.args)
		at := slices.Index(args, "--")
		if at < 0 {
			at = len(args)
		}
		args = slices.Insert(args, at, flags...)
		out, err := runCommand(t, c.name, args)
		for _, k := range []string{"KEEL_TOKEN", "KEEL_CA_FILE", "KEEL_CERT_FILE", "KEEL_KEY_FILE"} {
			os.Setenv(k, "")
		}
		ok := c.ok
		if ok == nil {
			ok = answered
		}
		if !ok(out, err) {
			t.Errorf("keel %s: %v (output %q): the node did not serve it", strings.Join(c.args, " "), err, out)
		}
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Error("keel leave: the node did not stop")
	}
}

func orUnsafe(out string, err error) bool {
	return errors.Is(err, errUnsafeUpgrade) || answered(out, err)
}

// runCommand runs one command line; watch runs until a PUT is printed or 5 s pass.
func runCommand(t *testing.T, name string, args []string) (string, error) {
	if name != "watch" {
		return runCLI(t, args...)
	}
	root := newRootCmd()
	out := &lockedBuffer{}
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs(normalizeArgs(root, args))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), "PUT") && time.Now().Before(deadline); {
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	return out.String(), <-done
}

// checkCommandTable fails for a command that is neither in cases nor local.
func checkCommandTable(t *testing.T, cases []cliCase) {
	var walk func(c *cobra.Command, path string)
	walk = func(c *cobra.Command, path string) {
		if len(c.Commands()) == 0 {
			if !slices.ContainsFunc(cases, func(c cliCase) bool { return c.name == path }) && !slices.Contains(localCommands, path) {
				t.Errorf("command %q is not in TestEveryCommandHonoursTLSAndToken: add a row (or to localCommands)", path)
			}
			return
		}
		for _, s := range c.Commands() {
			walk(s, strings.TrimSpace(path+" "+s.Name()))
		}
	}
	walk(newRootCmd(), "")
}

// lockedBuffer is a bytes.Buffer safe for one writer and one reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
