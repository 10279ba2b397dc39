package httpapi

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkHTTPGetLoopback* send GET /v1/kv/{key} over one keep-alive loopback
// connection to a real net/http server (the test server), from a client that writes
// prepared request bytes and reads the answer with one reused buffer: allocs/op is
// then the server's whole per-request cost — net/http's connection loop, routing,
// the handler and the answer — which the handler-only BenchmarkGet* leave out.
func BenchmarkHTTPGetLoopbackLinearizable(b *testing.B) { benchmarkHTTPGetLoopback(b, "") }
func BenchmarkHTTPGetLoopbackSerializable(b *testing.B) {
	benchmarkHTTPGetLoopback(b, "?consistency=serializable")
}

func benchmarkHTTPGetLoopback(b *testing.B, query string) {
	ts := newTestServer(b)
	ts.put("app/key", strings.Repeat("v", 256))
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	req := []byte("GET /v1/kv/app/key" + query + " HTTP/1.1\r\nHost: bench\r\n\r\n")
	rd := bufio.NewReaderSize(conn, 16<<10)
	body := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		n, err := readAnswer(rd)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rd, body[:n]); err != nil {
			b.Fatal(err)
		}
	}
}

// readAnswer reads a 200 answer's status line and headers and returns its
// Content-Length, without allocating.
func readAnswer(rd *bufio.Reader) (int, error) {
	n := -1
	for first := true; ; first = false {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case first && !bytes.HasPrefix(line, []byte("HTTP/1.1 200")):
			return 0, io.ErrUnexpectedEOF
		case len(line) == 0:
			if n < 0 {
				return 0, io.ErrUnexpectedEOF
			}
			return n, nil
		case bytes.HasPrefix(line, []byte("Content-Length: ")):
			n, err = strconv.Atoi(string(line[len("Content-Length: "):])) // no allocation: the conversion is not kept
			if err != nil {
				return 0, err
			}
		}
	}
}
