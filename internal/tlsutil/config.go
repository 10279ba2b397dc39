package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// ErrNotNode: a peer on the Raft/RPC port presented a certificate that is not a node's.
var ErrNotNode = errors.New("tlsutil: peer certificate is not a keel node certificate")

// Files names the PEM files of one party: the CA that signs the cluster's
// certificates, and this party's certificate and key. A client may leave CertFile and
// KeyFile empty (server authentication only); a node needs all three.
type Files struct {
	CAFile, CertFile, KeyFile string
	// CRLFile, optional, is the CA's certificate revocation list (crl.go).
	CRLFile string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool {
	return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.CRLFile != ""
}

// Validate checks that the files come in the combinations that work: a CA, and a
// certificate with its key or neither.
func (f Files) Validate() error {
	switch {
	case f.CAFile == "":
		return errors.New("tlsutil: a CA file (-ca-file) is required with -cert-file/-key-file")
	case (f.CertFile == "") != (f.KeyFile == ""):
		return errors.New("tlsutil: -cert-file and -key-file go together")
	}
	return nil
}

// material is one loaded generation of the files.
type material struct {
	pool *x509.CertPool
	cert *tls.Certificate // nil for a client without a certificate
	id   Identity         // of cert, when it has one
	// revoked holds the serials (decimal) the CRL lists; nil without a CRL file.
	revoked map[string]struct{}
}

// Reloader holds the current certificates of a party and loads them again on Reload
// (SIGHUP). Connections take the material current at their handshake; established
// connections keep theirs. Safe for concurrent use.
type Reloader struct {
	files Files
	cur   atomic.Pointer[material]
}

// NewReloader loads files once; an error names the file at fault.
func NewReloader(files Files) (*Reloader, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	r := &Reloader{files: files}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again; on error the previous material stays in use.
func (r *Reloader) Reload() error {
	m, err := load(r.files)
	if err != nil {
		return err
	}
	r.cur.Store(m)
	return nil
}

// Files are the files this reloader reads.
func (r *Reloader) Files() Files { return r.files }

// Identity is the keel identity of the current certificate (zero without one).
func (r *Reloader) Identity() Identity { return r.cur.Load().id }

func load(f Files) (*material, error) {
	caPEM, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tlsutil: CA file %s holds no PEM certificate", f.CAFile)
	}
	m := &material{pool: pool}
	if f.CRLFile != "" {
		if m.revoked, err = loadCRL(f.CRLFile, caPEM); err != nil {
			return nil, err
		}
	}
	if f.CertFile == "" {
		return m, nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		// LoadX509KeyPair's errors name no key bytes; they say which file is wrong.
		return nil, fmt.Errorf("tlsutil: load %s and %s: %w", f.CertFile, f.KeyFile, err)
	}
	leaf := cert.Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("tlsutil: %s is not signed by the CA in %s: %w", f.CertFile, f.CAFile, err)
	}
	m.cert = &cert
	if id, err := IdentityOf(leaf); err == nil {
		m.id = id
	}
	return m, nil
}

// HTTPServerConfig is the TLS config of the HTTP port: the current certificate, and,
// with verifyClients, a client certificate checked against the CA when one is shown
// (a bad one fails the handshake; the HTTP layer refuses requests without one, health
// checks aside).
func (r *Reloader) HTTPServerConfig(verifyClients bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.cur.Load()
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*m.cert},
				NextProtos: []string{"http/1.1"}}
			if verifyClients {
				c.ClientAuth = tls.VerifyClientCertIfGiven
				c.ClientCAs = m.pool
				c.VerifyConnection = m.checkRevoked
			}
			return c, nil
		},
	}
}

// PeerServerConfig is the TLS config of the Raft/RPC port: mutual TLS, and the peer
// must present a node certificate signed by the current CA (a client certificate,
// though signed by the same CA, is refused).
func (r *Reloader) PeerServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.cur.Load()
			return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*m.cert},
				ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: m.pool,
				VerifyConnection: func(cs tls.ConnectionState) error {
					if _, err := nodeOf(cs); err != nil {
						return err
					}
					return m.checkRevoked(cs)
				}}, nil
		},
	}
}

// PeerClientConfig is the TLS config of a connection to another node's Raft/RPC port:
// it presents this node's certificate and accepts only a node certificate signed by
// the current CA. When wantID is set, the peer's node ID must be wantID. Host names
// are not checked — the node identity is (nodes are dialed at advertised addresses
// that certificates need not list).
func (r *Reloader) PeerClientConfig(wantID string) *tls.Config {
	m := r.cur.Load()
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{*m.cert},
		InsecureSkipVerify: true, // verified below, against the CA, without host names
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyChain(cs, m.pool, x509.ExtKeyUsageServerAuth); err != nil {
				return err
			}
			id, err := nodeOf(cs)
			if err != nil {
				return err
			}
			if wantID != "" && id != wantID {
				return fmt.Errorf("tlsutil: dialed node %q but its certificate names node %q", wantID, id)
			}
			return m.checkRevoked(cs)
		},
	}
}

// ClientConfig is the TLS config of an HTTP client (the CLI, the Go client, the agent
// asking another node): server verified against the CA with host names, and this
// party's certificate presented when it has one.
func (r *Reloader) ClientConfig() *tls.Config {
	m := r.cur.Load()
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.pool, VerifyConnection: m.checkRevoked}
	if m.cert != nil {
		c.Certificates = []tls.Certificate{*m.cert}
	}
	return c
}

func verifyChain(cs tls.ConnectionState, pool *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsutil: peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return fmt.Errorf("tlsutil: peer certificate not signed by the cluster CA: %w", err)
	}
	return nil
}

// nodeOf returns the node ID of a verified peer certificate.
func nodeOf(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("tlsutil: peer presented no certificate")
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotNode, err)
	}
	if id.Kind != KindNode {
		return "", fmt.Errorf("%w: it names %s", ErrNotNode, id)
	}
	return id.Name, nil
}

// PeerNodeID returns the node ID of the verified peer of a finished handshake.
func PeerNodeID(cs tls.ConnectionState) (string, error) { return nodeOf(cs) }

// PeerNodeID is the package's PeerNodeID, as a method so that the Reloader is all the
// raft port needs (raft.PeerTLS).
func (r *Reloader) PeerNodeID(cs tls.ConnectionState) (string, error) { return nodeOf(cs) }
