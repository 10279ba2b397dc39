package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/keel-kv/keel/kv/api"
)

// net/http answers some requests itself, before any handler runs: 431 to oversized
// headers, 400 to a request line or header it cannot parse, 501 to an unknown
// Transfer-Encoding. It writes those answers straight to the connection as plain text
// (server.go, conn.serve), and offers no hook to change them. So that every error is
// JSON, the listener's connections recognise such an answer in the one Write that
// carries it and send the same status as an api.Error instead.
//
// The answer is recognised by its exact shape — status line, then precisely
// "Content-Type: text/plain; charset=utf-8" and "Connection: close" and the blank
// line — which no response written by a handler has: net/http sorts a handler's
// headers (Connection before Content-Type) and adds Date.
const rawErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// jsonErrorListener wraps every accepted connection in a jsonErrorConn.
type jsonErrorListener struct {
	net.Listener
	maxHeaderBytes int
}

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c, maxHeaderBytes: l.maxHeaderBytes}, nil
}

// jsonErrorConn rewrites net/http's own plain-text error answers as JSON; every other
// write passes through unchanged.
type jsonErrorConn struct {
	net.Conn
	maxHeaderBytes int
}

func (c *jsonErrorConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		return c.Conn.Write(p)
	}
	out, ok := rewriteRawError(p, c.maxHeaderBytes)
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrom keeps net/http's sendfile/splice path for bodies.
func (c *jsonErrorConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// CloseWrite half-closes the connection, as net/http does after a 431.
func (c *jsonErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// rewriteRawError returns p as a JSON error answer if p is one of net/http's own
// plain-text answers.
func rewriteRawError(p []byte, maxHeaderBytes int) ([]byte, bool) {
	line, rest, ok := bytes.Cut(p[len("HTTP/1.1 "):], []byte("\r\n"))
	if !ok || !bytes.HasPrefix(rest, []byte(rawErrorHeaders[2:])) || len(line) < 3 {
		return nil, false
	}
	code, err := strconv.Atoi(string(line[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	body := string(rest[len(rawErrorHeaders)-2:])
	e := api.Error{Code: code, Reason: api.ReasonBadRequest}
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		e.Reason = api.ReasonHeadersTooLarge
		e.Message = fmt.Sprintf("the request's header is larger than the maximum %d bytes", maxHeaderBytes)
	case http.StatusBadRequest:
		// "400 Bad Request" alone, or with net/http's detail after a colon.
		e.Message = "malformed request: the request line or a header cannot be parsed"
		if _, detail, ok := bytes.Cut([]byte(body), []byte(": ")); ok {
			e.Message = "malformed request: " + string(detail)
		}
	case http.StatusNotImplemented:
		e.Reason = api.ReasonNotImplemented
		e.Message = body
	default:
		e.Reason = http.StatusText(code)
		e.Message = body
	}
	js, _ := json.Marshal(&e)
	js = append(js, '\n')
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", line, len(js))
	b.Write(js)
	return b.Bytes(), true
}
