package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
	"github.com/keel-kv/keel/kv/client"
)

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTLSGossipClusterKeepsSecrets: three nodes with TLS and gossip form a cluster by
// gossip alone (the key is required with TLS), a gossip stranger without the key never
// becomes a member, and no secret — the gossip key, a TLS key, the cluster secret —
// appears in any log line or in /metrics.
func TestTLSGossipClusterKeepsSecrets(t *testing.T) {
	ca := tlstest.NewCA(t)
	key := bytes.Repeat([]byte{0x5a}, 32)
	logs := &syncBuffer{}
	c := &gossipCluster{t: t, dir: t.TempDir()}
	var keyFiles []string
	for range 3 {
		i := c.add(3)
		cfg := &c.cfgs[i]
		cfg.TLS = ca.Node(t, cfg.NodeID)
		keyFiles = append(keyFiles, cfg.TLS.KeyFile)
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.NodeID, Level: hclog.Trace, Output: logs})
		// Without the key the node refuses to start: TLS means gossip is encrypted too.
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "gossip must be encrypted") {
			t.Fatalf("TLS gossip config without a key: %v, want refused", err)
		}
		cfg.Gossip.EncryptKey = key
	}
	for i := range c.cfgs {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	c.waitConfig("bootstrap over encrypted gossip and mutual TLS", 30*time.Second,
		func(v, nv []string) bool { return len(v) == 3 })

	// A stranger with the right gossip address but no key (and no certificate).
	stranger := newGossipConfig(t, c.dir, "stranger", 0)
	stranger.Gossip.Join = []string{c.cfgs[0].Gossip.BindAddr}
	stranger.Gossip.ClusterLabel = c.cfgs[0].Gossip.ClusterLabel
	stranger.Insecure = true
	sa, err := Start(context.Background(), stranger)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close(context.Background())
	time.Sleep(2 * time.Second)
	for _, m := range c.agents[0].Members() {
		if m.Meta.NodeID == "stranger" {
			t.Errorf("the stranger without the gossip key is a gossip member: %+v", m)
		}
	}
	if _, v, nv := c.config(); len(v) != 3 || len(nv) != 0 {
		t.Errorf("after the stranger: voters %v non-voters %v, want the three", v, nv)
	}

	cli := tlstest.Reloader(t, ca.Client(t, "t")).ClientConfig()
	cl, _ := client.New([]string{c.agents[0].HTTPAddr()}, client.Options{TLS: cli, MaxRetries: 20})
	if _, err := cl.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cli}}
	resp, err := hc.Get("https://" + c.agents[0].HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	_, secret, ok := c.agents[0].Store().ClusterMeta()
	if !ok {
		t.Fatal("no cluster secret minted")
	}
	secrets := map[string]string{
		"gossip key (base64)":    base64.StdEncoding.EncodeToString(key),
		"gossip key (hex)":       hex.EncodeToString(key),
		"cluster secret (b64)":   base64.StdEncoding.EncodeToString(secret),
		"cluster secret (hex)":   hex.EncodeToString(secret),
		"cluster secret (bytes)": string(secret),
	}
	for i, f := range keyFiles {
		b, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		secrets["TLS key line of node "+string(rune('1'+i))] = lines[1]
	}
	all := logs.String()
	if len(all) < 1000 {
		t.Fatalf("only %d bytes of logs captured", len(all))
	}
	for what, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("the logs hold the %s", what)
		}
		if strings.Contains(string(metrics), s) {
			t.Errorf("/metrics holds the %s", what)
		}
	}
}
