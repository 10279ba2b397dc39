package chaos

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestSendPartsOutlastsAStall: the request-bytes attack must reach every call's
// prefix (those past the client's budget are what the node refuses) even when the
// server grants no window for a while, as a node under load or paused by a fault does;
// and each prefix must arrive whole, even when the connection's window opens by a few
// bytes. The attack used to stop after a second without window: on a loaded box it
// sent 4 to 12 of 150 prefixes per node and "no etcd Put over the client's request
// bytes in flight was refused (450 opened)".
//
//	client                      server (this test)
//	preface, 20 HEADERS  ──▶
//	DATA × 4 (64 KiB window)──▶ stalls 1.5 s, then opens the connection by 3 bytes,
//	                            then by 100 ms later by the rest, and each stream
//	                            by its whole part
//	DATA …                 ──▶ every stream's bytes begin with the 5-byte prefix
func TestSendPartsOutlastsAStall(t *testing.T) {
	const calls = 20
	cli, srv := net.Pipe()
	defer cli.Close()
	defer srv.Close()
	got := make(chan map[uint32][]byte, 1)
	go fakeStallingServer(srv, calls, got)

	f, err := newH2flow(cli)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	sent := map[uint32]int{}
	for range calls {
		var sid uint32
		if err := f.write(func() (err error) {
			sid, err = f.h.headers(grpcFields("/etcdserverpb.KV/Put", "token", 0), false)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		f.window[sid] += f.initial
		f.mu.Unlock()
		ids = append(ids, sid)
		sent[sid] = -5
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f.sendParts(ctx, ids, sent)
	srv.Close()
	bodies := <-got
	prefixes := 0
	for _, sid := range ids {
		b := bodies[sid]
		if len(b) < 5 {
			continue
		}
		if b[0] != 0 || binary.BigEndian.Uint32(b[1:5]) != bytesSize {
			t.Errorf("stream %d: its bytes begin % x, want the prefix 00 %08x", sid, b[:5], bytesSize)
			continue
		}
		prefixes++
	}
	if prefixes != calls {
		t.Errorf("%d of %d prefixes sent whole, want all", prefixes, calls)
	}
}

// fakeStallingServer plays the server of TestSendPartsOutlastsAStall on c and sends
// the bytes each stream received on got when c closes.
func fakeStallingServer(c net.Conn, calls int, got chan<- map[uint32][]byte) {
	bodies := map[uint32][]byte{}
	defer func() { got <- bodies }()
	if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	wmu := make(chan struct{}, 1)
	write := func(fn func() error) {
		wmu <- struct{}{}
		fn()
		<-wmu
	}
	go write(func() error { return fr.WriteSettings() })
	var streams []uint32
	opened := false
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch frame := frame.(type) {
		case *http2.HeadersFrame:
			streams = append(streams, frame.StreamID)
		case *http2.DataFrame:
			bodies[frame.StreamID] = append(bodies[frame.StreamID], frame.Data()...)
			if !opened {
				opened = true
				ids := append([]uint32(nil), streams...)
				go func() {
					time.Sleep(1500 * time.Millisecond)
					write(func() error { return fr.WriteWindowUpdate(0, 3) })
					time.Sleep(100 * time.Millisecond)
					write(func() error { return fr.WriteWindowUpdate(0, uint32(calls*(bytesPart+5))) })
					for _, id := range ids {
						write(func() error { return fr.WriteWindowUpdate(id, bytesPart) })
					}
				}()
			}
		}
	}
}
