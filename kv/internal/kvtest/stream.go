package kvtest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// RawStream upgrades a plain TCP connection to the server at url (http://host:port) to
// the stream protocol by hand, with the extra header lines (each ending in \r\n), so
// that tests can send frames no client would.
func RawStream(t testing.TB, url, header string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /v1/stream HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: keel-stream/1\r\n"+header+"\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != api.StreamProtocol {
		t.Fatalf("upgrade = %v, %v", resp, err)
	}
	return conn, br
}

// ReadStreamResponse reads and decodes one answer frame.
func ReadStreamResponse(t testing.TB, br *bufio.Reader) api.StreamResponse {
	t.Helper()
	body, err := api.ReadStreamFrame(br, api.MaxStreamFrame)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	var r api.StreamResponse
	if err := api.DecodeStreamResponse(body, &r); err != nil {
		t.Fatalf("decode answer: %v", err)
	}
	return r
}

// SendStreamRequest writes one request frame.
func SendStreamRequest(t testing.TB, conn io.Writer, r api.StreamRequest) {
	t.Helper()
	if _, err := conn.Write(api.AppendStreamRequest(nil, &r)); err != nil {
		t.Fatal(err)
	}
}
