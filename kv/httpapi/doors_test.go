package httpapi

// The doors in packages of their own (kv/stream) import httpapi, so httpapi's own
// tests cannot import them; doors_ext_test.go (package httpapi_test, in the same test
// binary) registers them here, and the test servers attach them.

// testDoors attach the other packages' doors to a test server.
var testDoors []func(*Server)

// AddTestDoor registers a door every test server of httpapi's tests attaches.
func AddTestDoor(attach func(*Server)) { testDoors = append(testDoors, attach) }

// attachTestDoors attaches the registered doors to srv.
func attachTestDoors(srv *Server) {
	for _, attach := range testDoors {
		attach(srv)
	}
}
