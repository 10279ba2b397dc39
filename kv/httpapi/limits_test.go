package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// serveTCP runs a server with cfg through Server.Serve on a loopback port (the path
// the agent takes, listener wrapper included) and returns its address.
func serveTCP(t *testing.T, opts ...func(*kv.Config)) string {
	t.Helper()
	_, addr := serveReal(t, opts...)
	return addr
}

// TestOversizedBodyWithoutExpectIs413: a client that sends its whole body without
// waiting for "100 Continue" (Go's http.Client, Python's urllib) reads the 413, not a
// connection reset, whether it announced the length or not, up to 4× the limit.
func TestOversizedBodyWithoutExpectIs413(t *testing.T) {
	addr := serveTCP(t)
	max := kv.DefaultConfig().MaxValueBytes
	hc := &http.Client{Transport: &http.Transport{}} // sends no Expect header
	defer hc.CloseIdleConnections()
	for i, tc := range []struct {
		size    int64
		chunked bool
	}{
		{max + 1, false},
		{2 * max, false},
		{4 * max, false},
		{2 * max, true},
	} {
		var body io.Reader = bytes.NewReader(bytes.Repeat([]byte("v"), int(tc.size)))
		if tc.chunked {
			body = io.MultiReader(body) // hides the length: chunked encoding
		}
		req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/kv/big", body)
		if req.Header.Get("Expect") != "" {
			t.Fatal("the client sends Expect")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("#%d: %d bytes (chunked %v): %v, want a 413 answer", i, tc.size, tc.chunked, err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 413 || e.Code != 413 || e.Reason != api.ReasonTooLarge {
			t.Errorf("#%d: %d bytes (chunked %v): %d %+v, want 413 TooLarge", i, tc.size, tc.chunked, resp.StatusCode, e)
		}
	}
	// Python's urllib writes the whole request, then reads: every write must succeed.
	for i, size := range []int64{max + 1, 2 * max, 4 * max} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		head := "PUT /v1/kv/big HTTP/1.1\r\nHost: keel\r\nContent-Length: " + strconv.FormatInt(size, 10) + "\r\n\r\n"
		_, err = conn.Write(append([]byte(head), bytes.Repeat([]byte("v"), int(size))...))
		if err != nil {
			conn.Close()
			t.Fatalf("urllib-like #%d: %d bytes: write: %v, want the whole body accepted", i, size, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			conn.Close()
			t.Fatalf("urllib-like #%d: %d bytes: %v", i, size, err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != 413 {
			t.Errorf("urllib-like #%d: %d bytes: %d, want 413", i, size, resp.StatusCode)
		}
	}
	// With Expect: 100-continue the answer comes before any body is sent.
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/kv/big", bytes.NewReader(make([]byte, 8*max)))
	req.Header.Set("Expect", "100-continue")
	resp, err := (&http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}).Do(req)
	if err != nil || resp.StatusCode != 413 {
		t.Fatalf("with Expect: %v %v, want 413", resp, err)
	}
	resp.Body.Close()
}

// TestNetHTTPOwnErrorsAreJSON: the answers net/http writes before any handler runs —
// 400 to a garbage request line or a missing Host, 431 to oversized headers, 501 to an
// unknown transfer coding — are api.Error JSON like every other error.
func TestNetHTTPOwnErrorsAreJSON(t *testing.T) {
	addr := serveTCP(t)
	for i, tc := range []struct {
		request string
		code    int
		reason  string
		message string
	}{
		{"GARBAGE\r\n\r\n", 400, api.ReasonBadRequest, "malformed request"},
		{"GET /v1/status HTTP/1.1\r\n\r\n", 400, api.ReasonBadRequest, "Host"},
		{"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n", 431, api.ReasonHeadersTooLarge, "header"},
		{"POST /v1/txn HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, api.ReasonNotImplemented, "transfer encoding"},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		go conn.Write([]byte(tc.request)) // a 431 may come before the header is all sent
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			conn.Close()
			t.Fatalf("#%d: %v", i, err)
		}
		var e api.Error
		derr := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != "application/json" || derr != nil ||
			e.Code != tc.code || e.Reason != tc.reason || !strings.Contains(e.Message, tc.message) {
			t.Errorf("#%d: %d %q %+v (%v), want %d JSON %s mentioning %q", i, resp.StatusCode,
				resp.Header.Get("Content-Type"), e, derr, tc.code, tc.reason, tc.message)
		}
	}
	// Handlers' answers pass through untouched.
	resp, err := http.Get("http://" + addr + "/v1/status")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestTxnBodyOverLimitSameWords: a txn body over MaxTxnBodyBytes is refused 413 in
// the core's words (kv.Server.DecodeTxn), the stream's too, whether it announced its
// length (refused unread) or came chunked (read up to the cap, then refused).
func TestTxnBodyOverLimitSameWords(t *testing.T) {
	addr := serveTCP(t, func(c *kv.Config) { c.MaxValueBytes, c.MaxTxnBodyBytes = 64, 1024 })
	want := "txn body is more than the maximum 1024 bytes"
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(`{"success":[]}` + strings.Repeat(" ", 1024))
		if chunked {
			body = io.MultiReader(body) // hides the length: chunked encoding
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+api.PathTxn, body)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("chunked %v: %v", chunked, err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 413 || e.Reason != api.ReasonTooLarge || !strings.Contains(e.Message, want) {
			t.Errorf("chunked %v: %d %+v, want 413 TooLarge saying %q", chunked, resp.StatusCode, e, want)
		}
	}
}
