package raft

import (
	"bufio"
	"strings"
	"testing"
)

// TestReadFrameNamesAnHTTPPeer: a Raft RPC sent to a keel HTTP port (a -join with the
// wrong port) says which port to use instead of "bad frame length 1213486160".
func TestReadFrameNamesAnHTTPPeer(t *testing.T) {
	_, err := readFrame(bufio.NewReader(strings.NewReader("HTTP/1.1 400 Bad Request\r\n\r\n")))
	if err == nil || !strings.Contains(err.Error(), "-raft-addr") || !strings.Contains(err.Error(), "HTTP API") {
		t.Fatalf("readFrame of an HTTP answer = %v", err)
	}
}
