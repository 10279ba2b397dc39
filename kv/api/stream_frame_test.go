package api

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// TestReadStreamFrameAllocatesAsDataArrives: a frame that announces 8 MiB and brings
// 100 bytes costs about one chunk of memory, not the announced size (kills: the body
// allocated whole from its length prefix).
func TestReadStreamFrameAllocatesAsDataArrives(t *testing.T) {
	const announced = 8 << 20
	wire := append(binary.AppendUvarint(nil, announced), bytes.Repeat([]byte{'x'}, 100)...)
	br := bufio.NewReaderSize(bytes.NewReader(wire), 4096)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadStreamFrame(br, MaxStreamFrame)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBadStreamFrame) {
		t.Fatalf("truncated frame: err %v, want ErrBadStreamFrame", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*streamFrameChunk {
		t.Errorf("an 8 MiB frame with 100 bytes sent allocated %d bytes, want at most %d", got, 4*streamFrameChunk)
	}
}

// TestReadStreamFrameWhole: frames around the chunk size arrive whole and in order.
func TestReadStreamFrameWhole(t *testing.T) {
	var wire []byte
	sizes := []int{0, 1, streamFrameChunk - 1, streamFrameChunk, streamFrameChunk + 1, 5*streamFrameChunk + 7}
	for i, n := range sizes {
		wire = binary.AppendUvarint(wire, uint64(n))
		wire = append(wire, bytes.Repeat([]byte{byte('a' + i)}, n)...)
	}
	br := bufio.NewReader(bytes.NewReader(wire))
	for i, n := range sizes {
		b, err := ReadStreamFrame(br, MaxStreamFrame)
		if err != nil || len(b) != n || (n > 0 && (b[0] != byte('a'+i) || b[n-1] != byte('a'+i))) {
			t.Fatalf("#%d: frame of %d bytes read as %d bytes, %v", i, n, len(b), err)
		}
	}
	if _, err := ReadStreamFrame(br, MaxStreamFrame); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want EOF", err)
	}
}
