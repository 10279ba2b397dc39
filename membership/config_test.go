package membership

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		want   string // in the error; "" = valid
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.NodeID = "" }, "NodeID is empty"},
		{func(c *Config) { c.BindAddr = "nope" }, `BindAddr "nope"`},
		{func(c *Config) { c.BindAddr = "127.0.0.1:70000" }, `BindAddr "127.0.0.1:70000"`},
		{func(c *Config) { c.AdvertiseAddr = "host.example:1" }, "must be an IP"},
		{func(c *Config) { c.AdvertiseAddr = "10.0.0.1:0" }, ""},
		{func(c *Config) { c.Join = []string{"a:1", ""} }, "Join[1] is empty"},
		{func(c *Config) { c.RetryJoin = true }, "RetryJoin needs Join"},
		{func(c *Config) { c.Join, c.RetryJoin, c.RetryJoinMaxBackoff = []string{"a:1"}, true, time.Millisecond }, "RetryJoinMaxBackoff 1ms"},
		{func(c *Config) { c.EncryptKey = make([]byte, 16) }, ""},
		{func(c *Config) { c.EncryptKey = make([]byte, 32) }, ""},
		{func(c *Config) { c.EncryptKey = make([]byte, 20) }, "EncryptKey is 20 bytes, want 16, 24 or 32"},
		{func(c *Config) { c.ClusterLabel = strings.Repeat("l", 256) }, "ClusterLabel is 256 bytes"},
		{func(c *Config) { c.ProbeInterval = 0 }, "ProbeInterval 0s"},
		{func(c *Config) { c.ProbeTimeout = 2 * time.Second }, "ProbeTimeout 2s must be < ProbeInterval 1s"},
		{func(c *Config) { c.SuspicionMult = 0 }, "SuspicionMult 0"},
		{func(c *Config) { c.GossipNodes = 0 }, "GossipNodes 0"},
		{func(c *Config) { c.DeadNodeReclaimTime = -1 }, "DeadNodeReclaimTime -1ns"},
		{func(c *Config) { c.EventBuffer = 0 }, "EventBuffer 0"},
		{func(c *Config) { c.DeadRetention = 0 }, "DeadRetention 0s"},
	}
	for i, tc := range cases {
		c := DefaultConfig()
		c.NodeID = "n1"
		tc.mutate(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("#%d: err = %v, want nil", i, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("#%d: err = %v, want ErrInvalidConfig naming %q", i, err, tc.want)
		}
	}
}

func TestDefaultConfigs(t *testing.T) {
	for name, c := range map[string]Config{"DefaultConfig": DefaultConfig(), "DefaultLoopbackConfig": DefaultLoopbackConfig()} {
		c.NodeID = "n1"
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if c := DefaultConfig(); c.BindAddr != "127.0.0.1:7372" || c.ProbeInterval != time.Second {
		t.Errorf("DefaultConfig BindAddr %q ProbeInterval %v, want 127.0.0.1:7372 and memberlist's LAN 1s", c.BindAddr, c.ProbeInterval)
	}
}

func TestMemberlistConfig(t *testing.T) {
	c := DefaultLoopbackConfig()
	c.NodeID, c.BindAddr, c.AdvertiseAddr = "n1", "0.0.0.0:7000", "10.1.2.3:0"
	c.ClusterLabel, c.EncryptKey = "blue", make([]byte, 24)
	mc := c.memberlistConfig(discardLogger(), &delegate{})
	if mc.Name != "n1" || mc.BindAddr != "0.0.0.0" || mc.BindPort != 7000 {
		t.Errorf("name/bind = %q %q %d", mc.Name, mc.BindAddr, mc.BindPort)
	}
	if mc.AdvertiseAddr != "10.1.2.3" || mc.AdvertisePort != 7000 {
		t.Errorf("advertise = %q %d, want 10.1.2.3 7000 (port 0: the bound port)", mc.AdvertiseAddr, mc.AdvertisePort)
	}
	if mc.Label != "blue" || len(mc.SecretKey) != 24 || mc.DeadNodeReclaimTime != c.DeadNodeReclaimTime {
		t.Errorf("label %q, key %d bytes, reclaim %v", mc.Label, len(mc.SecretKey), mc.DeadNodeReclaimTime)
	}
	if mc.Logger == nil || mc.LogOutput != nil || mc.Delegate == nil || mc.Alive == nil || mc.Merge == nil || mc.Events == nil {
		t.Errorf("logger and delegates must be set: %+v", mc)
	}
}
