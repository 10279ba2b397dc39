//go:build !unix

package agent

import "errors"

// freeBytes is not measured here: keel_server_quota_backend_bytes is left out.
func freeBytes(string) (uint64, error) {
	return 0, errors.New("agent: free space: not measured on this platform")
}
