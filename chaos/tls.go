package chaos

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// A TLS cluster (ProcConfig.TLS): every node runs with a certificate of one CA made by
// the binary's own `keel tls` helpers, mutual TLS on Raft, HTTPS with client
// certificates required; the harness's clients present a client certificate. The
// proxies in front of the Raft ports pass TLS through untouched, so link faults still
// apply.

// clusterTLS maps a node's HTTP address to the client TLS config that reaches it;
// every client the harness makes looks its address up here (nil: plain text).
var clusterTLS sync.Map

func tlsFor(httpAddr string) *tls.Config {
	if v, ok := clusterTLS.Load(httpAddr); ok {
		return v.(*tls.Config)
	}
	return nil
}

// harnessTLS is one TLS cluster's certificate directory.
type harnessTLS struct {
	bin, dir string
	client   *tls.Config
}

// newHarnessTLS creates the CA and the harness's client certificate in dir.
func newHarnessTLS(bin, dir string) (*harnessTLS, error) {
	h := &harnessTLS{bin: bin, dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := h.run("tls", "ca", "create"); err != nil {
		return nil, err
	}
	if err := h.run("tls", "cert", "create", "-client", "chaos"); err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "keel-ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "chaos.pem"), filepath.Join(dir, "chaos-key.pem"))
	if err != nil {
		return nil, err
	}
	h.client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
	return h, nil
}

func (h *harnessTLS) run(args ...string) error {
	cmd := exec.Command(h.bin, args...)
	cmd.Dir = h.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("keel %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// node creates node id's certificate for ip (once) and registers httpAddr's client
// config.
func (h *harnessTLS) node(id, ip, httpAddr string) error {
	clusterTLS.Store(httpAddr, h.client)
	if _, err := os.Stat(filepath.Join(h.dir, id+".pem")); err == nil {
		return nil
	}
	return h.run("tls", "cert", "create", "-node", id, "-ip", ip)
}

// args are node id's TLS flags.
func (h *harnessTLS) args(id string) []string {
	return []string{"-ca-file", filepath.Join(h.dir, "keel-ca.pem"), "-cert-file", filepath.Join(h.dir, id+".pem"),
		"-key-file", filepath.Join(h.dir, id+"-key.pem"), "-verify-clients"}
}

// clientArgs are the harness client's TLS flags, for keel's client commands.
func (h *harnessTLS) clientArgs() []string {
	return []string{"-ca-file", filepath.Join(h.dir, "keel-ca.pem"), "-cert-file", filepath.Join(h.dir, "chaos.pem"),
		"-key-file", filepath.Join(h.dir, "chaos-key.pem")}
}
