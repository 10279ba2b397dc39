package main

import (
	"net"
	"testing"

	"github.com/hashicorp/go-hclog"
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
