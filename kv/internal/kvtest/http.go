package kvtest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// Do sends one request to the server at url and returns status, body and headers.
func Do(t testing.TB, url, method, path string, body []byte) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b, resp.Header
}

// DoJSON sends a request, expects status want and decodes the body into out (nil:
// not decoded).
func DoJSON(t testing.TB, url, method, path string, body []byte, want int, out any) {
	t.Helper()
	code, b, _ := Do(t, url, method, path, body)
	if code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}
