package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// The client-certificate rule is the core's (kv.Server.CheckClientCert), for every
// door: on the HTTP port of a node that requires client certificates, a request
// without one is answered 401 ClientCertRequired through the one error table, one
// with a certificate of the cluster CA is served, and health checks answer without
// one (load balancers).
func TestHTTPDoorRequiresClientCert(t *testing.T) {
	ca := tlstest.NewCA(t)
	cfg := kv.DefaultConfig()
	cfg.TLS = tlstest.Reloader(t, ca.Node(t, "n1")).HTTPServerConfig(true)
	cfg.RequireClientCert = true
	_, addr := serveOn(t, cfg, kvtest.New())
	client := func(withCert bool) *http.Client {
		files := ca.CAOnly()
		if withCert {
			files = ca.Client(t, "tester")
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tlstest.Reloader(t, files).ClientConfig()}}
	}
	get := func(c *http.Client, path string) (int, api.Error) {
		t.Helper()
		resp, err := c.Get("https://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e api.Error
		json.Unmarshal(b, &e)
		return resp.StatusCode, e
	}

	bare := client(false)
	code, e := get(bare, api.PathKV+"k")
	if code != http.StatusUnauthorized || e.Code != http.StatusUnauthorized || e.Reason != api.ReasonClientCertRequired {
		t.Errorf("GET without a client certificate = %d %+v, want 401 %s", code, e, api.ReasonClientCertRequired)
	}
	for _, path := range []string{api.PathHealth, api.PathLive, api.PathReady} {
		if code, e := get(bare, path); code == http.StatusUnauthorized { // /livez is the agent's: 404 here
			t.Errorf("%s without a client certificate = %d %+v, want served", path, code, e)
		}
	}
	if code, e := get(client(true), api.PathKV+"k"); code == http.StatusUnauthorized {
		t.Errorf("GET with a client certificate of the cluster CA = %d %+v, want served", code, e)
	}
}

// plainOnTLSAnswer is spelled out as a constant (it is written before any HTTP
// parsing), so this keeps it the error table's answer (kv.WireError) to the refusal
// it carries, status line included: the two cannot drift apart.
func TestPlainOnTLSAnswerIsTheErrorTables(t *testing.T) {
	e := kv.WireError(errPlainHTTPOnTLS, false)
	js, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n%s\n",
		e.Code, http.StatusText(e.Code), js)
	if plainOnTLSAnswer != want {
		t.Errorf("plainOnTLSAnswer =\n%q\nthe error table answers\n%q", plainOnTLSAnswer, want)
	}
}
