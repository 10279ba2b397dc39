package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// TLS on the HTTP port. The stream protocol upgrades an HTTP connection, so it runs
// inside the same TLS session. The TLS layer sits under jsonErrorListener (which
// rewrites net/http's own plain-text answers), so it is keel's own: a client that
// speaks plain HTTP to the TLS port is answered, in plain text since that is all it
// reads, with a 400 whose JSON body says to use https — then the connection closes.

// plainOnTLSAnswer is written, unencrypted, to a client that sent plain HTTP: the
// answer writeError would give errPlainHTTPOnTLS, spelled out because it is written
// before any HTTP parsing (TestPlainOnTLSAnswerIsTheErrorTables keeps the two equal).
const plainOnTLSAnswer = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" +
	`{"code":400,"reason":"BadRequest","message":"this keel node serves HTTPS: use https:// (and -ca-file) to reach it"}` + "\n"

// errPlainHTTPOnTLS is the refusal plainOnTLSAnswer carries: a bad request in keel's
// error table (a kv.ErrInvalidParam: the URL's scheme) whose message is only the advice.
var errPlainHTTPOnTLS error = plainHTTPOnTLSError{}

type plainHTTPOnTLSError struct{}

func (plainHTTPOnTLSError) Error() string {
	return "this keel node serves HTTPS: use https:// (and -ca-file) to reach it"
}
func (plainHTTPOnTLSError) Unwrap() error { return kv.ErrInvalidParam }

// tlsListener wraps each accepted connection in a server-side TLS session.
type tlsListener struct {
	net.Listener
	cfg *tls.Config
}

func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tlsServerConn{Conn: tls.Server(c, l.cfg), raw: c}, nil
}

// tlsServerConn handshakes on its first Read (under the deadline net/http set for
// reading the request) so that a plain-text client can be told what is wrong.
type tlsServerConn struct {
	*tls.Conn
	raw  net.Conn
	once sync.Once
	herr error
}

func (c *tlsServerConn) handshake() error {
	c.once.Do(func() {
		c.herr = c.Conn.Handshake()
		var rh tls.RecordHeaderError
		if errors.As(c.herr, &rh) && rh.Conn != nil && looksLikeHTTP(rh.RecordHeader[:]) {
			rh.Conn.Write([]byte(plainOnTLSAnswer))
		}
	})
	return c.herr
}

func (c *tlsServerConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *tlsServerConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func looksLikeHTTP(hdr []byte) bool {
	switch string(hdr) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO", "DELET", "PATCH", "CONNE":
		return true
	}
	return false
}

type tlsConnKey struct{}

// tlsConnContext remembers a request's TLS session in its context (net/http fills
// Request.TLS only for a *tls.Conn it sees itself, and it sees jsonErrorConn).
func tlsConnContext(ctx context.Context, c net.Conn) context.Context {
	for {
		switch cc := c.(type) {
		case *tlsServerConn: // first: it has a NetConn too (its *tls.Conn's)
			return context.WithValue(ctx, tlsConnKey{}, cc)
		case *jsonErrorConn:
			c = cc.Conn
		case interface{ NetConn() net.Conn }: // the core's counted connection
			c = cc.NetConn()
		default:
			return ctx
		}
	}
}

// TLSState returns the TLS session of r (its verified client certificate, if any), or
// nil on a plain-text port. An authentication middleware reads the client identity
// from it.
func TLSState(r *http.Request) *tls.ConnectionState {
	tc, ok := r.Context().Value(tlsConnKey{}).(*tlsServerConn)
	if !ok {
		return nil
	}
	cs := tc.ConnectionState()
	return &cs
}

// requireClientCert refuses a request without a verified client certificate, or with
// a revoked one, as the core's rule says (kv.Server.CheckClientCert); health checks
// pass without one. The stream protocol's upgrade request passes here too.
func (s *Server) requireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.PathHealth, api.PathLive, api.PathReady:
			next.ServeHTTP(w, r)
			return
		}
		if err := s.core.CheckClientCert(func() *tls.ConnectionState { return TLSState(r) }); err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
