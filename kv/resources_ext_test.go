package kv_test

import (
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/resources"
)

// The typed layer serves /apis on every test server of kv's tests (doors_test.go); a
// test turns the schema on with SetResources.
func init() { kv.AddTestDoor(func(s *kv.Server) { s.SetObjectAPI(resources.New(s)) }) }
