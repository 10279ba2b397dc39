package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/tlsutil"
	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
	"github.com/keel-kv/keel/kv/client"
)

// newTLSTestCluster starts n agents with node certificates of one CA, HTTPS requiring
// client certificates, and returns a client config holding a client certificate. tune,
// when given, is applied to each node's config too.
func newTLSTestCluster(t *testing.T, n int, tune ...func(*Config)) (*testCluster, *tlstest.CA, map[string]tlsutil.Files) {
	ca := tlstest.NewCA(t)
	files := map[string]tlsutil.Files{}
	cli := tlstest.Reloader(t, ca.Client(t, "tester")).ClientConfig()
	c := newTestClusterWith(t, n, cli, func(cfg *Config) {
		files[cfg.NodeID] = ca.Node(t, cfg.NodeID)
		cfg.TLS, cfg.VerifyClients = files[cfg.NodeID], true
		for _, f := range tune {
			f(cfg)
		}
	})
	return c, ca, files
}

func TestTLSClusterServesHTTPSAndStream(t *testing.T) {
	c, ca, _ := newTLSTestCluster(t, 3)
	ctx := context.Background()
	cl, err := client.New([]string{c.agents[0].HTTPAddr()}, client.Options{Stream: true, TLS: c.clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Put(ctx, "secure", []byte("yes")); err != nil {
		t.Fatalf("put over the TLS stream: %v", err)
	}
	kv, err := c.client(2).Get(ctx, "secure")
	if err != nil || string(kv.Value) != "yes" {
		t.Fatalf("get on n3 over HTTPS = %v, %v", kv, err)
	}
	st, err := c.client(1).Status(ctx)
	if err != nil || !st.TLS || st.Insecure {
		t.Fatalf("status: tls=%v insecure=%v err=%v; want tls", st.TLS, st.Insecure, err)
	}

	// A plain-text client is told to use https, and nothing is served to it.
	resp, err := http.Get("http://" + c.agents[0].HTTPAddr() + "/v1/kv/secure?raw=true")
	if err != nil {
		t.Fatalf("plain GET on the TLS port: %v (want a 400 answer)", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "use https://") || strings.Contains(string(body), "yes") {
		t.Errorf("plain GET on the TLS port = %d %q, want 400 saying use https", resp.StatusCode, body)
	}
	// Without a client certificate: 401, but health checks answer (load balancers).
	caOnly := tlstest.Reloader(t, ca.CAOnly()).ClientConfig()
	noCert, _ := client.New([]string{c.agents[0].HTTPAddr()}, client.Options{MaxRetries: -1, TLS: caOnly})
	if _, err := noCert.Get(ctx, "secure"); err == nil || !strings.Contains(err.Error(), "ClientCertRequired") {
		t.Errorf("client without a certificate: %v, want 401 ClientCertRequired", err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: caOnly}}
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		resp, err := hc.Get("https://" + c.agents[0].HTTPAddr() + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s without a client certificate: %v %v, want 200", path, resp, err)
		} else {
			resp.Body.Close()
		}
	}
	// A client certificate of another CA fails the handshake.
	foreignCert := tlstest.Reloader(t, tlstest.NewCA(t).Client(t, "x")).ClientConfig()
	foreignCert.RootCAs = caOnly.RootCAs
	fc, _ := client.New([]string{c.agents[0].HTTPAddr()}, client.Options{MaxRetries: -1, TLS: foreignCert})
	if _, err := fc.Get(ctx, "secure"); err == nil {
		t.Error("client with a foreign CA's certificate read a key")
	}
	// A client that does not trust the cluster CA refuses the server.
	other := tlstest.NewCA(t)
	wrongCA, _ := client.New([]string{c.agents[0].HTTPAddr()}, client.Options{MaxRetries: -1,
		TLS: tlstest.Reloader(t, other.Client(t, "x")).ClientConfig()})
	if _, err := wrongCA.Get(ctx, "secure"); err == nil {
		t.Error("client trusting another CA read a key; want the server refused")
	}
}

func TestTLSNodeIDMustMatchCertificate(t *testing.T) {
	ca := tlstest.NewCA(t)
	cfg := testConfig(t, t.TempDir(), "n1")
	cfg.Raft.Bootstrap = true
	cfg.TLS = ca.Node(t, "n2")
	_, err := Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), `node "n1" has the certificate of node "n2"`) {
		t.Fatalf("start n1 with n2's certificate: %v, want refused", err)
	}
	cfg.TLS = ca.Client(t, "n1")
	if _, err = Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "not a node certificate") {
		t.Fatalf("start with a client certificate: %v, want refused", err)
	}
	// Without -node-id the node takes its certificate's ID.
	cfg.NodeID = ""
	cfg.TLS = ca.Node(t, "from-cert")
	a, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if a.NodeID() != "from-cert" {
		t.Errorf("node id = %q, want the certificate's from-cert", a.NodeID())
	}
}

// TestTLSRotationUnderLoad replaces every node's certificate and key while clients
// write over new connections, reloads (what SIGHUP does), and checks that no request
// failed and that new handshakes show the new certificates.
func TestTLSRotationUnderLoad(t *testing.T) {
	c, ca, files := newTLSTestCluster(t, 3)
	addrs := make([]string, 3)
	for i, a := range c.agents {
		addrs[i] = a.HTTPAddr()
	}
	// Fresh connections for every request, so handshakes happen throughout.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.clientTLS, DisableKeepAlives: true}}
	cl, err := client.New(addrs, client.Options{HTTPClient: hc, TLS: c.clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := cl.Put(ctx, fmt.Sprintf("rot/%d/%d", w, i), []byte("v")); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	serialBefore := serverSerial(t, addrs[0], c.clientTLS)
	for i, a := range c.agents {
		id := c.cfgs[i].NodeID
		fresh := ca.Node(t, id)
		for _, mv := range [][2]string{{fresh.CertFile, files[id].CertFile}, {fresh.KeyFile, files[id].KeyFile}} {
			if err := os.Rename(mv[0], mv[1]); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.ReloadTLS(); err != nil {
			t.Fatalf("reload n%d: %v", i+1, err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed during rotation; first: %v", n, n+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 20 {
		t.Fatalf("only %d requests ran: the load did not cover the rotation", ok.Load())
	}
	if after := serverSerial(t, addrs[0], c.clientTLS); after == serialBefore {
		t.Error("after reload the server still shows its old certificate")
	}
	// A reload that would change the node's identity is refused; the old files stay.
	other := ca.Node(t, "someone-else")
	os.Rename(other.CertFile, files["n1"].CertFile)
	os.Rename(other.KeyFile, files["n1"].KeyFile)
	if err := c.agents[0].ReloadTLS(); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("reload with another node's certificate: %v, want refused", err)
	}
	if _, err := c.client(0).Get(context.Background(), "rot/0/0"); err != nil {
		t.Errorf("after a refused reload: %v", err)
	}
}

func serverSerial(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}
