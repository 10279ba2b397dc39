package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
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
	root := newCLI()
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

// TestAgentReloadsCertificatesOnSIGHUP: a real SIGHUP to a running agent makes new
// connections see the replaced certificate.
func TestAgentReloadsCertificatesOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-node", "n1"},
		{"tls", "cert", "create", "-client", "ops"}} {
		if _, err := runKeel(t, dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	httpAddr := freeport.Addr()
	caFile := filepath.Join(dir, "keel-ca.pem")
	root := newCLI()
	root.SetArgs(normalizeArgs(root, []string{"agent", "-node-id", "n1", "-data-dir", filepath.Join(dir, "data"),
		"-http-addr", httpAddr, "-raft-addr", freeport.Addr(), "-bootstrap", "-log-level", "warn",
		"-ca-file", caFile, "-cert-file", filepath.Join(dir, "n1.pem"), "-key-file", filepath.Join(dir, "n1-key.pem")}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	r, err := tlsutil.NewReloader(tlsutil.Files{CAFile: caFile, CertFile: filepath.Join(dir, "ops.pem"), KeyFile: filepath.Join(dir, "ops-key.pem")})
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", httpAddr, r.ClientConfig())
		if err != nil {
			return ""
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	var before string
	for deadline := time.Now().Add(10 * time.Second); before == "" && time.Now().Before(deadline); {
		before = serial()
		time.Sleep(50 * time.Millisecond)
	}
	if before == "" {
		t.Fatal("the TLS agent never answered a handshake")
	}
	next := t.TempDir()
	if _, err := runKeel(t, next, "tls", "cert", "create", "-node", "n1", "-ca", caFile,
		"-ca-key", filepath.Join(dir, "keel-ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1.pem", "n1-key.pem"} {
		if err := os.Rename(filepath.Join(next, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	after := before
	for deadline := time.Now().Add(5 * time.Second); after == before && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		after = serial()
	}
	if after == before || after == "" {
		t.Fatalf("after SIGHUP the agent shows certificate %q, want a new one (was %q)", after, before)
	}
}
