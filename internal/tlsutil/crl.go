package tlsutil

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"
)

// Certificate revocation lists. Files.CRLFile (agent flag -crl-file) names the CA's
// CRL, PEM ("X509 CRL") or DER, signed by a CA of the CA file. A certificate whose
// serial it lists is refused on every port: either side of the Raft/RPC port, an HTTP
// client's certificate, and the server certificate a node's own HTTP requests reach.
// SIGHUP reads it again with the other files; an unreadable or unsigned CRL keeps the
// old material, and refuses to start a node. A CRL past its NextUpdate is still used
// (a stale list revokes no less than it did).

// ErrRevoked: the peer's certificate is listed in the CA's CRL (-crl-file).
var ErrRevoked = errors.New("tlsutil: certificate revoked by the CA's CRL")

// loadCRL reads the CRL at path and returns the revoked serials; the CRL must be
// signed by one of the CA certificates in caPEM.
func loadCRL(path string, caPEM []byte) (map[string]struct{}, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: read CRL file: %w", err)
	}
	if b, _ := pem.Decode(raw); b != nil {
		if b.Type != "X509 CRL" {
			return nil, fmt.Errorf("tlsutil: %s holds a PEM %q block, want \"X509 CRL\"", path, b.Type)
		}
		raw = b.Bytes
	}
	crl, err := x509.ParseRevocationList(raw)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: parse CRL %s: %w", path, err)
	}
	signed := false
	for rest := caPEM; len(rest) > 0 && !signed; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if ca, err := x509.ParseCertificate(b.Bytes); err == nil {
			signed = crl.CheckSignatureFrom(ca) == nil
		}
	}
	if !signed {
		return nil, fmt.Errorf("tlsutil: CRL %s is not signed by the CA", path)
	}
	serials := map[string]struct{}{}
	for _, e := range crl.RevokedCertificateEntries {
		serials[e.SerialNumber.String()] = struct{}{}
	}
	return serials, nil
}

// checkRevoked refuses a peer whose certificate the CRL lists.
func (m *material) checkRevoked(cs tls.ConnectionState) error {
	if len(m.revoked) == 0 || len(cs.PeerCertificates) == 0 {
		return nil
	}
	leaf := cs.PeerCertificates[0]
	if _, ok := m.revoked[leaf.SerialNumber.String()]; ok {
		return fmt.Errorf("%w: serial %s", ErrRevoked, leaf.SerialNumber)
	}
	return nil
}

// CreateCRL writes a new CRL at crlPath (never overwriting), signed by the CA, that
// revokes the certificates in certPaths; it is valid for lifetime.
func CreateCRL(caCertPath, caKeyPath, crlPath string, lifetime time.Duration, certPaths ...string) error {
	ca, key, err := loadCA(caCertPath, caKeyPath)
	if err != nil {
		return err
	}
	tmpl := &x509.RevocationList{ThisUpdate: time.Now().Add(-time.Minute), NextUpdate: time.Now().Add(lifetime)}
	for _, p := range certPaths {
		cert, err := readCert(p)
		if err != nil {
			return err
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: cert.SerialNumber, RevocationTime: time.Now()})
	}
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return fmt.Errorf("tlsutil: CRL number: %w", err)
	}
	tmpl.Number = n
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca, key)
	if err != nil {
		return fmt.Errorf("tlsutil: create CRL: %w", err)
	}
	return writeNew(crlPath, pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o644)
}

func readCert(path string) (*x509.Certificate, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("tlsutil: %s holds no PEM certificate", path)
	}
	return x509.ParseCertificate(b.Bytes)
}
