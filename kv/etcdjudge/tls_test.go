package etcdjudge

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/keel-kv/keel/internal/freeport"
)

// keelTLS runs `keel tls ARGS` in dir.
func keelTLS(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(keelBin, append([]string{"tls"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("keel tls %v: %v\n%s", args, err, out)
	}
}

// A node with TLS and -verify-clients serves its etcd port over TLS with the same
// certificates, and refuses a client without a certificate of the cluster CA.
func TestTLSClientCertificates(t *testing.T) {
	dir := t.TempDir()
	keelTLS(t, dir, "ca", "create")
	keelTLS(t, dir, "cert", "create", "-node", "t1")
	keelTLS(t, dir, "cert", "create", "-client", "judge")
	certs, _ := filepath.Glob(filepath.Join(dir, "*.pem"))
	pem := func(name string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v (have %v)", err, certs)
		}
		return p
	}
	caPEM, err := os.ReadFile(pem("keel-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	clientCert, err := tls.LoadX509KeyPair(pem("judge.pem"), pem("judge-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}
	n, err := startNodeTLS(filepath.Join(dir, "node"), freeport.Addr(), withCert, "-bootstrap", "-node-id", "t1",
		"-acl-default", "allow", "-ca-file", pem("keel-ca.pem"), "-cert-file", pem("t1.pem"),
		"-key-file", pem("t1-key.pem"), "-verify-clients")
	if err != nil {
		t.Fatal(err)
	}
	defer n.stop()
	ctx := testCtx(t)
	c, err := n.client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "/tls/k", "v"); err != nil {
		t.Fatalf("put over TLS with a client certificate: %v", err)
	}
	n.tls = &tls.Config{RootCAs: pool} // no client certificate
	bare, err := n.client()
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := bare.Get(ctx, "/tls/k"); !errors.Is(err, rpctypes.ErrInvalidAuthToken) {
		t.Fatalf("get without a client certificate: %v, want %v", err, rpctypes.ErrInvalidAuthToken)
	}
}
