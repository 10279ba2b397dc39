package kv_test

import (
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/stream"
)

// The stream protocol's door serves every test server of kv's tests (doors_test.go).
func init() { kv.AddTestDoor(func(s *kv.Server) { stream.Attach(s) }) }
