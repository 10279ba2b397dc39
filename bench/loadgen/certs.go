package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// makeCerts creates, with keel's own helpers (keelBin tls ...), a CA in dir, node
// certificates <prefix>0..<prefix>3 (each for 127.0.0.1, server and client auth) and
// a client certificate "loadgen", and returns the client's TLS config. keel and etcd
// runs use the same scheme: ECDSA P-256, one CA, TLS on client and peer ports, client
// certificates required.
func makeCerts(keelBin, dir, prefix string) (*tls.Config, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	keelBin, err := filepath.Abs(keelBin) // commands run in dir
	if err != nil {
		return nil, err
	}
	run := func(args ...string) error {
		cmd := exec.Command(keelBin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("keel %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("tls", "ca", "create"); err != nil {
		return nil, err
	}
	for i := 0; i < 4; i++ {
		if err := run("tls", "cert", "create", "-node", fmt.Sprintf("%s%d", prefix, i)); err != nil {
			return nil, err
		}
	}
	if err := run("tls", "cert", "create", "-client", "loadgen"); err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "keel-ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "loadgen.pem"), filepath.Join(dir, "loadgen-key.pem"))
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}
