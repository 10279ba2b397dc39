package httpapi_test

import (
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/stream"
)

// The stream protocol's door serves every test server of httpapi's tests (doors_test.go).
func init() { httpapi.AddTestDoor(func(s *httpapi.Server) { stream.Attach(s) }) }
