package kv

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Limits that keep slow or greedy clients from holding a node's resources:
//
//   - connections: at most MaxConns client connections (HTTP and stream) are open at
//     once; one more is answered 429 TooManyConnections and closed.
//   - requests in flight: at most MaxInFlight requests (HTTP, and every request of
//     every stream) run at once; one more is answered 429 TooManyRequests. Health
//     checks and watches do not count (watches have MaxWatches).
//   - per stream connection: at most MaxStreamInFlight requests in flight; the server
//     stops reading the connection until one finishes (backpressure, no error).
//   - a stream frame, once begun, must arrive whole within StreamFrameTimeout, or the
//     connection is closed (a client that declares a frame and stalls, or sends bytes
//     that are not the protocol).

// ErrTooManyRequests: the node runs its maximum of requests; retry later or elsewhere.
var ErrTooManyRequests = errors.New("kv: too many requests in flight")

// ErrTooManyConnections: the node holds its maximum of client connections.
var ErrTooManyConnections = errors.New("kv: too many connections")

// limitListener closes connections beyond max with a 429 answer.
type limitListener struct {
	net.Listener
	max  int
	open *atomic.Int64
}

func (l limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); n > int64(l.max) {
			l.open.Add(-1)
			go refuseConn(c, l.max)
			continue
		}
		return &countedConn{Conn: c, open: l.open}, nil
	}
}

// refuseConn answers a connection over the limit and closes it (bounded in time: a
// client that never reads cannot keep it).
func refuseConn(c net.Conn, max int) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	msg := fmt.Sprintf(`{"code":429,"reason":%q,"message":"this node holds its maximum of %d client connections: retry later or on another node"}`,
		api.ReasonTooManyConnections, max)
	fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		len(msg), msg)
}

// countedConn gives its slot back once, on the first Close.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// acquireRequest takes a slot for one request in flight; false when none is free.
func (s *Server) acquireRequest() bool {
	if s.inFlight.Add(1) > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		return false
	}
	return true
}

func (s *Server) releaseRequest() { s.inFlight.Add(-1) }

func (s *Server) tooManyRequests() error {
	return fmt.Errorf("%w: this node runs its maximum of %d requests at once: retry later or on another node",
		ErrTooManyRequests, s.cfg.MaxInFlight)
}

// limitInFlight answers 429 to a request beyond MaxInFlight. Health checks, the
// stream upgrade (its requests count one by one) and watches are not counted.
func (s *Server) limitInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if uncounted(r) {
			next.ServeHTTP(w, r)
			return
		}
		if !s.acquireRequest() {
			s.writeError(w, r, s.tooManyRequests())
			return
		}
		defer s.releaseRequest()
		next.ServeHTTP(w, r)
	})
}

func uncounted(r *http.Request) bool {
	switch r.URL.Path {
	case api.PathHealth, api.PathReady, api.PathLive, api.PathStream:
		return true
	}
	return strings.HasPrefix(r.URL.Path, api.PathWatch) || r.URL.Query().Has("watch")
}
