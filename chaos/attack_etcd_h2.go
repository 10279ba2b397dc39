package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// The huge-metadata attack speaks HTTP/2 by hand: gRPC's own client refuses
// oversized headers before it sends them.

// metadataLoop tries the huge-metadata Range on node id until one try is conclusive.
func (a *attacker) metadataLoop(ctx context.Context, id, addr string) {
	e := a.etcd
	for range etcdMetadataTries {
		served, how, conclusive := a.hugeMetadata(ctx, addr)
		e.mu.Lock()
		switch {
		case served:
			e.metaServed = append(e.metaServed, id+": "+how)
		case conclusive:
			e.metaRefused = append(e.metaRefused, id+": "+how)
		default:
			e.metaInconclusive++
		}
		e.mu.Unlock()
		if served || conclusive || !sleepCtx(ctx, 2*time.Second) {
			return
		}
	}
}

// hugeMetadata sends, on one bare HTTP/2 connection, a serializable Range with 1 KiB
// of metadata, which must be served, then one with etcdHugeMetadata bytes: served
// reports whether the second was; conclusive, that the first was served (else the node
// was down or paused and the try says nothing).
func (a *attacker) hugeMetadata(ctx context.Context, addr string) (served bool, how string, conclusive bool) {
	e := a.etcd
	cfg := e.tls.Clone()
	cfg.NextProtos = []string{"h2"}
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := (&tls.Dialer{NetDialer: dialerFrom(e.srcCalls), Config: cfg}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return false, "dial: " + err.Error(), false
	}
	defer c.Close()
	stop := context.AfterFunc(dctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	h := &h2conn{w: bufio.NewWriterSize(c, 64<<10), next: 1}
	h.fr = http2.NewFramer(h.w, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(h.w, http2.ClientPreface)
	h.fr.WriteSettings()
	req := &pb.RangeRequest{Key: []byte("k/0"), Serializable: true}
	id, err := h.call(pb.KV_Range_FullMethodName, a.roToken, 1<<10, req)
	if err != nil {
		return false, "write: " + err.Error(), false
	}
	if ok, how := h.answer(id); !ok {
		return false, "the 1 KiB control was not served: " + how, false
	}
	if id, err = h.call(pb.KV_Range_FullMethodName, a.roToken, etcdHugeMetadata, req); err != nil {
		return false, "write: " + err.Error(), true // the server closed the connection while it came
	}
	served, how = h.answer(id)
	// A node paused after the control holds the call unanswered: no verdict.
	return served, how, served || !strings.Contains(how, "timeout")
}

// h2conn is a bare HTTP/2 client connection: what a hostile client sends, unchecked
// by gRPC's client.
type h2conn struct {
	w    *bufio.Writer
	fr   *http2.Framer
	next uint32
}

// call starts a gRPC call of method with token and pad bytes of extra metadata and
// sends msg; it returns the stream ID.
func (h *h2conn) call(method, token string, pad int, msg proto.Message) (uint32, error) {
	id, err := h.headers(grpcFields(method, token, pad), false)
	if err != nil {
		return id, err
	}
	body, err := proto.Marshal(msg)
	if err != nil {
		return id, err
	}
	frame := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(body)))
	if err := h.fr.WriteData(id, true, append(frame, body...)); err != nil {
		return id, err
	}
	return id, h.w.Flush()
}

// grpcFields are the headers of a gRPC call of method with token and pad bytes of
// extra metadata.
func grpcFields(method, token string, pad int) [][2]string {
	return [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", method}, {":authority", "keel"},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {rpctypes.TokenFieldNameGRPC, token},
		{"x-pad", strings.Repeat("p", pad)}}
}

// headers opens the next stream with fields (every one a literal: the block depends
// on no earlier one), in a HEADERS frame and CONTINUATIONs, ending the stream when
// end; it returns the stream ID. It does not flush.
func (h *h2conn) headers(fields [][2]string, end bool) (uint32, error) {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
	}
	b := block.Bytes()
	id := h.next
	h.next += 2
	n := min(len(b), 16384)
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:n], EndHeaders: n == len(b), EndStream: end}); err != nil {
		return id, err
	}
	for b = b[n:]; len(b) > 0; b = b[n:] {
		n = min(len(b), 16384)
		if err := h.fr.WriteContinuation(id, n == len(b), b[:n]); err != nil {
			return id, err
		}
	}
	return id, nil
}

// answer reads frames until the server's verdict on stream id: served (headers without
// an error status), or refused (a reset stream, a GOAWAY, a closed connection, an error
// status).
func (h *h2conn) answer(id uint32) (bool, string) {
	for range 1000 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return false, "connection: " + err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
				h.w.Flush()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
				h.w.Flush()
			}
		case *http2.GoAwayFrame:
			return false, "GOAWAY " + f.ErrCode.String()
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return false, "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if st := f.PseudoValue("status"); st != "" && st != "200" {
				return false, "HTTP status " + st
			}
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					msg := ""
					for _, m := range f.Fields {
						if m.Name == "grpc-message" {
							msg = " " + m.Value
						}
					}
					return hf.Value == "0", "grpc-status " + hf.Value + msg
				}
			}
			return true, "headers"
		}
	}
	return false, "no answer in 1000 frames"
}
