package httpapi_test

import (
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/resources"
)

// The typed layer serves /apis on every test server of httpapi's tests
// (doors_test.go); a test turns the schema on with SetResources.
func init() {
	httpapi.AddTestDoor(func(s *httpapi.Server) { s.Core().SetObjectAPI(resources.New(s.Core())) })
}
