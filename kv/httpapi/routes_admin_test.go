package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

func TestStatus(t *testing.T) {
	ts := newTestServer(t)
	rev := ts.put("k", "v")
	var st api.StatusResponse
	ts.doJSON(http.MethodGet, "/v1/status", nil, 200, &st)
	if st.NodeID != "local" || st.State != "Leader" || st.LeaderID != "local" || st.Revision != rev ||
		st.AppliedIndex == 0 || len(st.Members) != 1 || !st.Members[0].Leader || st.Members[0].Suffrage != "Voter" {
		t.Fatalf("status = %+v", st)
	}
}

func TestHealthAndReady(t *testing.T) {
	store := kvtest.NewWithSecret(nil)
	ts := newTestServerOn(t, store)
	var h api.HealthResponse
	ts.doJSON(http.MethodGet, "/healthz", nil, 200, &h)
	if h.Status != "ok" {
		t.Fatalf("healthz = %+v", h)
	}
	e := ts.expectError(http.MethodGet, "/readyz", nil, 503, api.ReasonUnavailable)
	if !strings.Contains(e.Message, "cluster secret") {
		t.Fatalf("readyz without secret: %q does not name the secret", e.Message)
	}
	store.SetSecret(kvtest.Secret)
	ts.doJSON(http.MethodGet, "/readyz", nil, 200, &h)

	store.SetNoLeader(true)
	e = ts.expectError(http.MethodGet, "/readyz", nil, 503, api.ReasonUnavailable)
	if !strings.Contains(e.Message, "no known leader") {
		t.Fatalf("readyz without leader: %q", e.Message)
	}
	ts.doJSON(http.MethodGet, "/healthz", nil, 200, &h)
	store.SetNoLeader(false)

	ts.core.AddReadyCheck("storage versions", func(context.Context) error {
		return errors.New("not registered")
	})
	e = ts.expectError(http.MethodGet, "/readyz", nil, 503, api.ReasonUnavailable)
	if !strings.Contains(e.Message, "storage versions: not registered") {
		t.Fatalf("readyz with failing check: %q", e.Message)
	}

	// ?verbose lists every check, Kubernetes style.
	rec := httptest.NewRecorder()
	ts.srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz?verbose", nil))
	body := rec.Body.String()
	if rec.Code != 503 || !strings.Contains(body, "[+]leader ok") ||
		!strings.Contains(body, "[-]storage versions failed: not registered") ||
		!strings.HasSuffix(body, "readyz check failed\n") {
		t.Fatalf("readyz?verbose: %d\n%s", rec.Code, body)
	}
}

// TestServeShutdown: Serve on a real listener, Shutdown stops it and Serve returns nil.
func TestServeShutdown(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(core)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	resp, err := http.Get(url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after Shutdown, want nil", err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("server still answers after Shutdown")
	}
	if err := srv.Serve(ln); err == nil {
		t.Fatal("Serve after Shutdown succeeded")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := kv.DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	tests := []struct {
		mod  func(*kv.Config)
		want string
	}{
		{func(c *kv.Config) { c.Addr = "nope" }, "Addr"},
		{func(c *kv.Config) { c.MaxKeyBytes = 0 }, "MaxKeyBytes"},
		{func(c *kv.Config) { c.MaxValueBytes = 0 }, "MaxValueBytes"},
		{func(c *kv.Config) { c.MaxTxnBodyBytes = 10 }, "MaxTxnBodyBytes"},
		{func(c *kv.Config) { c.MaxListLimit = 0 }, "MaxListLimit"},
		{func(c *kv.Config) { c.MaxListBytes = 0 }, "MaxListBytes"},
		{func(c *kv.Config) { c.RequestTimeout = 0 }, "RequestTimeout"},
		{func(c *kv.Config) { c.ReadHeaderTimeout = 0 }, "ReadHeaderTimeout"},
		{func(c *kv.Config) { c.WriteTimeout = time.Second }, "WriteTimeout"},
		{func(c *kv.Config) { c.SecretWait = 0 }, "SecretWait"},
		{func(c *kv.Config) { c.RetryAfter = time.Millisecond }, "RetryAfter"},
		// Far below the Raft log's 256 MiB record: one request is one log entry.
		{func(c *kv.Config) { c.MaxValueBytes, c.MaxTxnBodyBytes = 65<<20, 65<<20 }, "must be <= 67108864"},
		{func(c *kv.Config) { c.MaxTxnBodyBytes = kv.MaxRequestBytesLimit + 1 }, "MaxTxnBodyBytes"},
	}
	for i, tt := range tests {
		c := kv.DefaultConfig()
		tt.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("#%d: Validate = %v, want an error naming %s", i, err, tt.want)
		}
		if _, err := kv.NewServer(c, kvtest.New(), nil); err == nil {
			t.Errorf("#%d: kv.NewServer accepted an invalid config", i)
		}
	}
	if _, err := kv.NewServer(kv.DefaultConfig(), nil, nil); err == nil {
		t.Error("NewServer accepted a nil store")
	}
}
