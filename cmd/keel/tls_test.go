package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-kv/keel/internal/tlsutil"
)

// runKeel runs the keel command line in dir and returns its output.
func runKeel(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(normalizeArgs(root, args))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestTLSHelpersWriteUsableFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := runKeel(t, dir, "tls", "ca", "create"); err != nil {
		t.Fatal(err)
	}
	if _, err := runKeel(t, dir, "tls", "ca", "create"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second ca create: %v, want refused (never overwrite a CA)", err)
	}
	if _, err := runKeel(t, dir, "tls", "cert", "create", "-node", "n1", "-ip", "10.1.2.3", "-dns", "n1.internal"); err != nil {
		t.Fatal(err)
	}
	if _, err := runKeel(t, dir, "tls", "cert", "create", "-client", "ops"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		mode os.FileMode
	}{{"keel-ca-key.pem", 0o600}, {"n1-key.pem", 0o600}, {"ops-key.pem", 0o600}, {"keel-ca.pem", 0o644}} {
		st, err := os.Stat(filepath.Join(dir, tc.file))
		if err != nil || st.Mode().Perm() != tc.mode {
			t.Errorf("%s: mode %v, %v; want %v", tc.file, st.Mode().Perm(), err, tc.mode)
		}
	}
	cert := readCert(t, filepath.Join(dir, "n1.pem"))
	if id, err := tlsutil.IdentityOf(cert); err != nil || id != (tlsutil.Identity{Kind: tlsutil.KindNode, Name: "n1"}) {
		t.Errorf("n1.pem identity = %v, %v", id, err)
	}
	if !strings.Contains(strings.Join(cert.DNSNames, ","), "n1.internal") || len(cert.IPAddresses) != 2 {
		t.Errorf("n1.pem names %v %v, want n1.internal, localhost, 10.1.2.3, 127.0.0.1", cert.DNSNames, cert.IPAddresses)
	}
	// The files load as a node's and a client's TLS material.
	if _, err := tlsutil.NewReloader(tlsutil.Files{CAFile: filepath.Join(dir, "keel-ca.pem"),
		CertFile: filepath.Join(dir, "ops.pem"), KeyFile: filepath.Join(dir, "ops-key.pem")}); err != nil {
		t.Errorf("client files: %v", err)
	}
	if _, err := runKeel(t, dir, "tls", "cert", "create", "-node", "bad/name"); err == nil {
		t.Error("-node bad/name accepted")
	}
	out, err := runKeel(t, dir, "tls", "gossip-key")
	if k, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(out)); err != nil || derr != nil || len(k) != 32 {
		t.Errorf("gossip-key printed %q (%v, %v), want base64 of 32 bytes", out, err, derr)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAgentRefusesPlainTextUnlessInsecure: outside -dev a node without TLS files
// refuses to start and says how to fix it; -insecure with TLS files is contradictory.
func TestAgentRefusesPlainTextUnlessInsecure(t *testing.T) {
	dir := t.TempDir()
	_, err := runKeel(t, dir, "agent", "-data-dir", filepath.Join(dir, "d"), "-bootstrap")
	if !errors.Is(err, errNoTLS) || !strings.Contains(err.Error(), "-insecure") {
		t.Fatalf("agent without TLS: %v, want the refusal naming -insecure", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "d")); serr == nil {
		t.Error("the refused agent created its data dir")
	}
	_, err = runKeel(t, dir, "agent", "-data-dir", filepath.Join(dir, "d"), "-insecure", "-ca-file", "x.pem")
	if err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("-insecure with -ca-file: %v, want refused", err)
	}
}
