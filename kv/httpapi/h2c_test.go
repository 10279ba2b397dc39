package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestH2C: a client speaking HTTP/2 over cleartext (prior knowledge) gets the same
// answers as over HTTP/1.1, a watch streams over it, and HTTP/1.1 still works on the
// same port.
func TestH2C(t *testing.T) {
	addr := serveTCP(t)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	do := func(c *http.Client, method, path, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := do(h2, http.MethodPut, "/v1/kv/k", "v")
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || !strings.Contains(body, `"revision":1`) {
		t.Fatalf("h2c put: %s %d %s", resp.Proto, resp.StatusCode, body)
	}
	resp, body = do(h2, http.MethodGet, "/v1/kv/absent", "")
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusNotFound || !strings.Contains(body, api.ReasonNotFound) {
		t.Fatalf("h2c get absent: %s %d %s", resp.Proto, resp.StatusCode, body)
	}
	resp, body = do(http.DefaultClient, http.MethodGet, "/v1/kv/k", "")
	if resp.ProtoMajor != 1 || resp.StatusCode != http.StatusOK || !strings.Contains(body, `"value":"dg=="`) {
		t.Fatalf("HTTP/1.1 get: %s %d %s", resp.Proto, resp.StatusCode, body)
	}
	wresp, err := h2.Get("http://" + addr + "/v1/watch/k?start_revision=1")
	if err != nil {
		t.Fatal(err)
	}
	defer wresp.Body.Close()
	line, err := bufio.NewReader(wresp.Body).ReadBytes('\n')
	var ev api.WatchEvent
	if err != nil || json.Unmarshal(line, &ev) != nil || wresp.ProtoMajor != 2 || ev.Type != api.EventPut || ev.Revision != 1 {
		t.Fatalf("h2c watch: %s %q %v", wresp.Proto, line, err)
	}
}
