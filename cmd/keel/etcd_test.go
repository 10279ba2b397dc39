package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/internal/freeport"
)

// -etcd-addr: off or empty serves none outside -dev; -dev serves etcd's client port,
// or any free port when that one is taken, never failing to start for it.
func TestEtcdAddr(t *testing.T) {
	log := hclog.NewNullLogger()
	for _, c := range []struct {
		f    agentFlags
		want string
	}{
		{agentFlags{}, ""},
		{agentFlags{etcdAddr: "off"}, ""},
		{agentFlags{etcdAddr: "off", dev: true}, ""},
		{agentFlags{etcdAddr: "127.0.0.1:2400"}, "127.0.0.1:2400"},
		{agentFlags{etcdAddr: "127.0.0.1:2400", dev: true}, "127.0.0.1:2400"},
	} {
		if got := etcdAddr(c.f, log); got != c.want {
			t.Errorf("etcdAddr(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
	got := etcdAddr(agentFlags{dev: true}, log)
	if got != devEtcdAddr && got != "127.0.0.1:0" {
		t.Fatalf("-dev: %q", got)
	}
	if ln, err := net.Listen("tcp", devEtcdAddr); err == nil {
		defer ln.Close()
		if got := etcdAddr(agentFlags{dev: true}, log); got != "127.0.0.1:0" {
			t.Fatalf("-dev with %s taken: %q, want a free port", devEtcdAddr, got)
		}
	}
}

// TestDevAgentStartsWithEtcdPortTaken: `keel agent -dev -http-addr 127.0.0.1:0` while
// etcd's client port is taken (another etcd, the `make run` node) starts, with the
// HTTP and etcd APIs on two different free ports. It was refused ("etcd address
// 127.0.0.1:0 is the HTTP address"): two requests for any free port were taken for one
// port.
func TestDevAgentStartsWithEtcdPortTaken(t *testing.T) {
	if ln, err := net.Listen("tcp", devEtcdAddr); err == nil {
		defer ln.Close() // hold it; when it is not free, the condition holds already
	}
	f := parseAgentFlags(t, "--dev", "--http-addr", "127.0.0.1:0", "--raft-addr", freeport.Addr(), "--data-dir", t.TempDir())
	cfg, _, err := agentConfig(f, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("agent -dev -http-addr 127.0.0.1:0 with %s taken: %v", devEtcdAddr, err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Close(ctx)
	}()
	if a.EtcdAddr() == "" || a.EtcdAddr() == a.HTTPAddr() || a.EtcdAddr() == devEtcdAddr {
		t.Fatalf("etcd API on %q, HTTP on %q: want two free ports, neither %s", a.EtcdAddr(), a.HTTPAddr(), devEtcdAddr)
	}
}

// parseAgentFlags is `keel agent ARGS`' flags, defaults included.
func parseAgentFlags(t *testing.T, args ...string) agentFlags {
	t.Helper()
	var f agentFlags
	fl := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	f.register(fl)
	if err := fl.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestAgentFlagsFromEnv: every agent flag can come from KEEL_<NAME> (how the container
// image and the systemd unit configure a node); the command line wins, and a bad value
// names its variable.
func TestAgentFlagsFromEnv(t *testing.T) {
	env := map[string]string{"KEEL_DATA_DIR": "/data", "KEEL_HTTP_ADDR": "0.0.0.0:7370", "KEEL_JOIN": "a:1,b:2",
		"KEEL_BOOTSTRAP_EXPECT": "3", "KEEL_INSECURE": "true", "KEEL_RAFT_ADDR": "0.0.0.0:7371"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var f agentFlags
	fl := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	f.register(fl)
	if err := fl.Parse([]string{"--raft-addr", "10.0.0.1:7371"}); err != nil {
		t.Fatal(err)
	}
	if err := agentFlagsFromEnv(fl, lookup); err != nil {
		t.Fatal(err)
	}
	if f.dataDir != "/data" || f.httpAddr != "0.0.0.0:7370" || len(f.join) != 2 || f.bootstrapExpect != 3 || !f.insecure {
		t.Errorf("from the environment: %+v", f)
	}
	if f.raftAddr != "10.0.0.1:7371" {
		t.Errorf("raft addr = %q, want the command line's over KEEL_RAFT_ADDR", f.raftAddr)
	}
	// The CLI's TLS variables reach a TLS node, not a -dev or -insecure one.
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"KEEL_CA_FILE": "ca.pem"}, "ca.pem"},
		{map[string]string{"KEEL_CA_FILE": "ca.pem", "KEEL_DEV": "true"}, ""},
		{map[string]string{"KEEL_CA_FILE": "ca.pem", "KEEL_INSECURE": "1"}, ""},
	} {
		env = c.env
		var g agentFlags
		fl := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		g.register(fl)
		if err := agentFlagsFromEnv(fl, lookup); err != nil || g.caFile != c.want {
			t.Errorf("env %v: ca file %q (%v), want %q", c.env, g.caFile, err, c.want)
		}
	}
	env = map[string]string{"KEEL_BOOTSTRAP_EXPECT": "three"}
	fl = pflag.NewFlagSet("agent", pflag.ContinueOnError)
	f.register(fl)
	if err := agentFlagsFromEnv(fl, lookup); err == nil || !strings.Contains(err.Error(), "KEEL_BOOTSTRAP_EXPECT") {
		t.Errorf("a bad value = %v, want an error naming KEEL_BOOTSTRAP_EXPECT", err)
	}
}
