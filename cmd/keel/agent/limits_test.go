package agent

import (
	"testing"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/raft/wal"
)

// TestRequestLimitFitsTheLog: the largest request the HTTP API can be configured to
// take becomes one Raft log entry; it must fit in one WAL record with room for the
// command's encoding, or the log would refuse a write the API had accepted.
func TestRequestLimitFitsTheLog(t *testing.T) {
	if 2*kv.MaxRequestBytesLimit > wal.MaxRecordBytes {
		t.Fatalf("kv.MaxRequestBytesLimit %d leaves too little room below wal.MaxRecordBytes %d",
			kv.MaxRequestBytesLimit, wal.MaxRecordBytes)
	}
}
