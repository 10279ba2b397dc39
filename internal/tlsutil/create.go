package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"time"
)

// Lifetimes of what the helpers create: a CA outlives the certificates it signs, and
// certificates are renewed yearly (as `consul tls` does).
const (
	CALifetime   = 5 * 365 * 24 * time.Hour
	CertLifetime = 365 * 24 * time.Hour
)

// File names the helpers write in the current directory.
const (
	CAFile    = "keel-ca.pem"
	CAKeyFile = "keel-ca-key.pem"
)

// CertRequest says what certificate to create.
type CertRequest struct {
	Identity Identity
	IPs      []net.IP
	DNS      []string
	Lifetime time.Duration // 0: CertLifetime
}

// CreateCA writes a new CA certificate and key to certPath and keyPath (key 0600).
// It refuses to overwrite either: replacing a CA cuts every node off.
func CreateCA(certPath, keyPath string, lifetime time.Duration) error {
	if lifetime <= 0 {
		lifetime = CALifetime
	}
	if err := refuseExisting(certPath, keyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("tlsutil: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "keel CA " + serial.Text(16)[:8], Organization: []string{"keel"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("tlsutil: create CA certificate: %w", err)
	}
	return writePair(certPath, keyPath, der, key)
}

// CreateCert writes a certificate for req signed by the CA in caCert/caKey. A node
// certificate serves and dials (server and client auth) and always lists localhost and
// 127.0.0.1; a client certificate only authenticates a client.
func CreateCert(caCertPath, caKeyPath, certPath, keyPath string, req CertRequest) error {
	if _, err := ParseIdentity(req.Identity.URI()); err != nil {
		return err
	}
	if err := refuseExisting(certPath, keyPath); err != nil {
		return err
	}
	ca, caKey, err := loadCA(caCertPath, caKeyPath)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("tlsutil: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return err
	}
	lifetime := req.Lifetime
	if lifetime <= 0 {
		lifetime = CertLifetime
	}
	now := time.Now()
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	u, _ := url.Parse(req.Identity.URI())
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Identity.Name, Organization: []string{"keel"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		URIs:         []*url.URL{u},
		DNSNames:     req.DNS,
		IPAddresses:  req.IPs,
	}
	if req.Identity.Kind == KindNode {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = appendNew(tmpl.DNSNames, "localhost")
		if !hasIP(tmpl.IPAddresses, net.IPv4(127, 0, 0, 1)) {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, 0, 0, 1))
		}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("tlsutil: sign certificate: %w", err)
	}
	return writePair(certPath, keyPath, der, key)
}

func loadCA(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: read CA certificate (create one with keel tls ca create): %w", err)
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("tlsutil: %s holds no PEM certificate", certPath)
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: parse %s: %w", certPath, err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("tlsutil: %s is not a CA certificate", certPath)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: read CA key: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, fmt.Errorf("tlsutil: %s holds no PEM key", keyPath)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: %s is not an EC private key", keyPath)
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("tlsutil: %s is not the key of %s", keyPath, certPath)
	}
	return ca, key, nil
}

func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("tlsutil: encode key: %w", err)
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		os.Remove(keyPath)
		return err
	}
	return nil
}

// writeNew creates path with mode (never overwriting) and syncs it.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	if err := f.Chmod(mode); err != nil { // exactly mode, whatever the umask
		f.Close()
		return fmt.Errorf("tlsutil: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("tlsutil: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("tlsutil: sync %s: %w", path, err)
	}
	return f.Close()
}

func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("tlsutil: %s exists; remove it first (nothing was written)", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tlsutil: %w", err)
		}
	}
	return nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("tlsutil: serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func hasIP(list []net.IP, ip net.IP) bool {
	for _, x := range list {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}
