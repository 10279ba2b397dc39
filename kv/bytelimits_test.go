package kv

import (
	"errors"
	"testing"

	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// AdmitBytes holds a client to its bytes in flight and the node to its own, and gives
// them back once: with a client bound of 16 MiB and a node bound of 24 MiB,
//
//	a: 8 + 8 MiB        admitted (16 of 16)
//	a: +1 byte          refused (client)
//	b: 8 MiB            admitted (node 24 of 24)
//	c: 1 byte           refused (node)
//	a gives back 8 MiB; c: 1 byte admitted
func TestAdmitBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxRequestBytesInFlightPerClient, cfg.MaxRequestBytesInFlight = 16<<20, 24<<20
	s, err := NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	admit := func(addr string, n int64, want bool) func() {
		t.Helper()
		release, err := s.AdmitBytes(addr, n)
		if got := err == nil; got != want {
			t.Fatalf("%s: %d bytes: err = %v, want admitted %v", addr, n, err, want)
		}
		if err != nil && !errors.Is(err, ErrTooManyRequests) {
			t.Fatalf("%s: err = %v, want ErrTooManyRequests", addr, err)
		}
		return release
	}
	a1 := admit("10.0.0.1:1", 8<<20, true)
	admit("10.0.0.1:2", 8<<20, true)
	admit("10.0.0.1:3", 1, false)
	admit("10.0.0.2:1", 8<<20, true)
	admit("10.0.0.3:1", 1, false)
	a1()
	a1() // once
	if node, client := s.RequestBytesInFlight("10.0.0.1"); node != 16<<20 || client != 8<<20 {
		t.Fatalf("in flight: node %d, client %d; want %d and %d", node, client, 16<<20, 8<<20)
	}
	admit("10.0.0.3:1", 1, true)
}
