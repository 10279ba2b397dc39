package tlsutil_test

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/tlsutil"
	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
)

// handshake runs both sides of a TLS handshake over loopback TCP and returns each
// side's error (TLS 1.3: the server checks the client's certificate after the
// client's handshake is done, so the client writes a byte and the server reads it).
func handshake(t *testing.T, server, client *tls.Config) (serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		s := tls.Server(conn, server)
		if err = s.Handshake(); err == nil {
			_, err = s.Read(make([]byte, 1))
		}
		errc <- err
	}()
	conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	c := tls.Client(conn, client)
	if cerr = c.Handshake(); cerr == nil {
		_, cerr = c.Write([]byte{1})
	}
	if cerr != nil {
		conn.Close()
	}
	return <-errc, cerr
}

// TestCRLRefusesRevokedCertificates: with -crl-file, a certificate the CA's CRL lists
// is refused on every side of every port — a node dialing the Raft port, a node
// answering it, an HTTP client — while the others pass; a CRL of another CA does not load.
func TestCRLRefusesRevokedCertificates(t *testing.T) {
	ca := tlstest.NewCA(t)
	n1, n2, n3 := ca.Node(t, "n1"), ca.Node(t, "n2"), ca.Node(t, "n3")
	ops, dev := ca.Client(t, "ops"), ca.Client(t, "dev")
	crl := ca.CRL(t, n2, ops)
	with := func(f tlsutil.Files) *tlsutil.Reloader { f.CRLFile = crl; return tlstest.Reloader(t, f) }
	srv := with(n1)
	httpClient := func(f tlsutil.Files) *tls.Config {
		c := tlstest.Reloader(t, f).ClientConfig()
		c.ServerName = "localhost"
		return c
	}
	for _, tc := range []struct {
		what           string
		server, client *tls.Config
		revoked        bool
	}{
		{"raft port, revoked node dials", srv.PeerServerConfig(), tlstest.Reloader(t, n2).PeerClientConfig(""), true},
		{"raft port, node dials", srv.PeerServerConfig(), tlstest.Reloader(t, n3).PeerClientConfig(""), false},
		{"raft port, dialing a revoked node", tlstest.Reloader(t, n2).PeerServerConfig(), srv.PeerClientConfig(""), true},
		{"raft port, dialing a node", tlstest.Reloader(t, n3).PeerServerConfig(), srv.PeerClientConfig("n3"), false},
		{"HTTP, revoked client", srv.HTTPServerConfig(true), httpClient(ops), true},
		{"HTTP, client", srv.HTTPServerConfig(true), httpClient(dev), false},
		{"HTTP, node reaching a revoked node", tlstest.Reloader(t, n2).HTTPServerConfig(false), with(n3).ClientConfig(), true},
	} {
		if tc.what == "HTTP, node reaching a revoked node" {
			tc.client.ServerName = "localhost"
		}
		serr, cerr := handshake(t, tc.server, tc.client)
		revoked := errors.Is(serr, tlsutil.ErrRevoked) || errors.Is(cerr, tlsutil.ErrRevoked)
		if revoked != tc.revoked || (!tc.revoked && (serr != nil || cerr != nil)) {
			t.Errorf("%s: server %v, client %v; want revoked=%v", tc.what, serr, cerr, tc.revoked)
		}
	}
	other := tlstest.NewCA(t)
	f := n1
	f.CRLFile = other.CRL(t)
	if _, err := tlsutil.NewReloader(f); err == nil || !strings.Contains(err.Error(), "not signed by the CA") {
		t.Errorf("CRL of another CA: %v, want refused", err)
	}
}
