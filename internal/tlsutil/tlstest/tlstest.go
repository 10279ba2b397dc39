// Package tlstest creates a throwaway CA and certificates in a test's temp dir, with
// the same code as `keel tls` (tlsutil.CreateCA, CreateCert).
package tlstest

import (
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/tlsutil"
)

// CA is a test CA whose files live in Dir.
type CA struct {
	Dir           string
	CertFile, Key string
}

var seq atomic.Int64

// NewCA creates a CA in a new temp dir of t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	dir := t.TempDir()
	ca := &CA{Dir: dir, CertFile: filepath.Join(dir, tlsutil.CAFile), Key: filepath.Join(dir, tlsutil.CAKeyFile)}
	if err := tlsutil.CreateCA(ca.CertFile, ca.Key, 0); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Node returns the files of a new node certificate for id (localhost, 127.0.0.1).
func (ca *CA) Node(t testing.TB, id string) tlsutil.Files {
	t.Helper()
	return ca.issue(t, tlsutil.Identity{Kind: tlsutil.KindNode, Name: id})
}

// Client returns the files of a new client certificate for name.
func (ca *CA) Client(t testing.TB, name string) tlsutil.Files {
	t.Helper()
	return ca.issue(t, tlsutil.Identity{Kind: tlsutil.KindClient, Name: name})
}

// CAOnly returns files naming the CA alone (a client without a certificate).
func (ca *CA) CAOnly() tlsutil.Files { return tlsutil.Files{CAFile: ca.CertFile} }

func (ca *CA) issue(t testing.TB, id tlsutil.Identity) tlsutil.Files {
	t.Helper()
	base := filepath.Join(ca.Dir, fmt.Sprintf("%s-%d", id.Name, seq.Add(1)))
	f := tlsutil.Files{CAFile: ca.CertFile, CertFile: base + ".pem", KeyFile: base + "-key.pem"}
	req := tlsutil.CertRequest{Identity: id, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if err := tlsutil.CreateCert(ca.CertFile, ca.Key, f.CertFile, f.KeyFile, req); err != nil {
		t.Fatal(err)
	}
	return f
}

// Reloader loads f or fails the test.
func Reloader(t testing.TB, f tlsutil.Files) *tlsutil.Reloader {
	t.Helper()
	r, err := tlsutil.NewReloader(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// CRL writes a CRL of the CA revoking the certificates of files and returns its path.
func (ca *CA) CRL(t testing.TB, files ...tlsutil.Files) string {
	t.Helper()
	path := filepath.Join(ca.Dir, fmt.Sprintf("crl-%d.pem", seq.Add(1)))
	var certs []string
	for _, f := range files {
		certs = append(certs, f.CertFile)
	}
	if err := tlsutil.CreateCRL(ca.CertFile, ca.Key, path, time.Hour, certs...); err != nil {
		t.Fatal(err)
	}
	return path
}
