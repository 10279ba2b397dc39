//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
)

// TestACLBootstrapSecretFile: `keel acl bootstrap -secret-file F` writes the secret to
// a new file of mode 0600 and prints it nowhere; an existing F is refused before the
// cluster is bootstrapped (so no secret is lost). Kills: the file created with the
// umask's mode (0644), or after the token is minted.
func TestACLBootstrapSecretFile(t *testing.T) {
	addr := startCLINode(t, kv.ACLDeny)
	dir := t.TempDir()
	// The agent made the whole process's umask 077; a CLI process runs with the
	// operator's, typically 022, under which only an explicit 0600 keeps the file private.
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })

	existing := filepath.Join(dir, "existing")
	os.WriteFile(existing, []byte("keep"), 0o644)
	if _, err := runCLI(t, "acl", "bootstrap", "-addr", addr, "-secret-file", existing); err == nil {
		t.Fatal("bootstrap into an existing file succeeded, want it refused")
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Fatalf("the existing file was changed to %q", b)
	}

	path := filepath.Join(dir, "root.token")
	var out string
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; {
		if out, err = runCLI(t, "acl", "bootstrap", "-addr", addr, "-secret-file", path); err == nil || time.Now().After(deadline) {
			break
		}
		os.Remove(path)
		time.Sleep(100 * time.Millisecond) // no leader yet
	}
	if err != nil {
		t.Fatalf("bootstrap: %v (an earlier refused attempt must not have bootstrapped the cluster)", err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	secret := strings.TrimSpace(string(b))
	if !strings.HasPrefix(secret, "keel_") || strings.Contains(out, secret) {
		t.Fatalf("secret file holds %q, output %q: want the secret in the file only", b, out)
	}
	if _, err := runCLI(t, "acl", "token", "self", "-addr", addr, "-token", secret); err != nil {
		t.Fatalf("the file's secret does not work: %v", err)
	}
}
