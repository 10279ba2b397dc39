package chaos

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/keel-kv/keel/kv/api"
)

// The request-bytes and HTTP/2 attacks (issue #33's last rules), beside the etcd-door
// attacks and run with them (startEtcd), each from a loopback address of its own so
// that the per-client budgets it runs into are its own. On bytesNodes nodes (not all:
// on 2 shared cores the load of five would cost the workload and the fault checks
// their timing), one after another, and held until the attack ends (at most
// attackHold):
//
//   - on the etcd port, one bare HTTP/2 connection opens bytesCalls Puts, each
//     announcing a bytesSize message and sending bytesPart of it (keeping to the flow
//     windows): the node holds at most its 64 MiB budget for the client
//     (-max-request-bytes-in-flight-per-client) and refuses the other calls at their
//     prefix (ResourceExhausted);
//   - on the HTTP port, httpBytesConns PUTs (the tenant's token, under tenantPrefix)
//     announce httpBytesSize with Content-Length and send httpBytesPart: those over the
//     budget are answered 429;
//   - on the HTTP port, HTTP/2 with prior knowledge (h2c: the port's TLS carries no
//     ALPN) on h2cStreams connections, a watch on every stream (the read-only token's
//     on the first, the tenant's on the others):
//     the first connection asks more than the 1,024 streams a connection may carry,
//     and all together more than the 2,500 connections and streams one client may
//     hold, so some are reset and some answered 429;
//   - on the HTTP port, an h2c request with h2cHugeHeader bytes of headers, after one
//     with 1 KiB on the same connection that must be served: the node refuses the
//     second (its header list is bounded at 16 KiB).
//
// They run in every TLS run of make chaos (KEEL_CHAOS_BYTES=0 leaves them out; make
// chaos-bytes runs that scenario alone). Before they joined: the proxy's "unidentified
// source" check had three causes in the harness (socketOwner's scan racing a closing
// socket, a restarted node dialing before the proxy listed it, the etcd attack giving up
// before every prefix was sent), all fixed; then 14 of 16 runs passed on a 2-core box at
// load ~20 (the 2 failures: fail-fast probes over 1.5 s under that load) and 15 of 16 at
// load 3-9, the one failure a check of the lease attacks that asked PermissionDenied of
// a lease a fault had already expired (now only logged, as its survival is).
//
// checkBytes then asks that each attack was refused at least once (they proved
// something), that no connection carried more than 1,024 watches and no node more
// than 2,500 of the client's, and that the huge header list was never served; the
// memory and goroutine bounds of checkEtcd cover them all.

const (
	bytesNodes     = 3
	bytesCalls     = 150
	bytesSize      = 2 << 20
	bytesPart      = 256 << 10
	httpBytesConns = 100
	httpBytesSize  = 1 << 20
	httpBytesPart  = 512 << 10
	h2cHugeHeader  = 64 << 10
	// attackHold bounds how long an attack holds its connections when the run lasts.
	attackHold = 3 * time.Minute
	// maxStreamsPerConn is the agent's -max-stream-in-flight: streams on one HTTP/2
	// connection.
	maxStreamsPerConn = 1024
)

// h2cStreams are the watches opened on each h2c connection to a node.
var h2cStreams = []int{1200, 900, 600}

// bytesAttack is the state of the attacks above, in etcdAttack.
type bytesAttack struct {
	srcEtcdBytes, srcHTTPBytes, srcH2C string
	etcdCalls, etcdRefused, etcdEnded  atomic.Int64
	httpPuts, httpRefused, httpOther   atomic.Int64
	h2cOpened, h2cServed, h2cRefused   atomic.Int64 // served: 200; refused: 429
	h2cReset, h2cOther                 atomic.Int64
	bmu                                sync.Mutex
	h2cPerConn                         []string // "node: served/asked" beyond a connection's bound
	h2cPerNode                         map[string]int64
	h2cOtherStatus                     map[string]int // the other answers, by status
	hdrRefused, hdrServed              []string
	hdrInconclusive                    int
}

// bytesAttacks says whether the attacks above run: unless KEEL_CHAOS_BYTES=0.
func bytesAttacks() bool { return os.Getenv("KEEL_CHAOS_BYTES") != "0" }

// startBytes starts the attacks on node id (its etcd and HTTP addresses) after delay.
func (a *attacker) startBytes(ctx context.Context, id string, delay time.Duration) {
	if !bytesAttacks() {
		return
	}
	e := a.etcd
	if e.h2cPerNode == nil {
		sub := a.c.cfg.Subnet
		e.srcEtcdBytes, e.srcHTTPBytes, e.srcH2C = etcdAttackHost(sub, 2), etcdAttackHost(sub, 3), etcdAttackHost(sub, 4)
		e.h2cPerNode, e.h2cOtherStatus = map[string]int64{}, map[string]int{}
	}
	etcdAddr, httpAddr := a.c.EtcdAddr(id), a.c.HTTPAddr(id)
	for _, f := range []func(){
		func() { a.etcdBytes(ctx, id, etcdAddr) },
		func() { a.httpBytes(ctx, httpAddr) },
		func() { a.h2cWatches(ctx, id, httpAddr) },
		func() { a.hugeHeaderLoop(ctx, id, httpAddr) },
	} {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if sleepCtx(ctx, delay) {
				f()
			}
		}()
	}
}

// dialTLS connects to addr from src with the client certificate, offering protos
// (none: no ALPN), its deadline attackHold or ctx's end, whichever first; stop undoes
// the latter.
func (a *attacker) dialTLS(ctx context.Context, src, addr string, protos []string) (c net.Conn, stop func() bool, err error) {
	cfg := a.etcd.tls.Clone()
	cfg.NextProtos = protos
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err = (&tls.Dialer{NetDialer: dialerFrom(src), Config: cfg}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(attackHold))
	return c, context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) }), nil
}

// h2flow is a bare HTTP/2 client connection whose frames a goroutine reads: the
// windows it may send in, and each stream's end.
type h2flow struct {
	h       *h2conn
	wmu     sync.Mutex // writes
	mu      sync.Mutex
	conn    int64
	initial int64
	window  map[uint32]int64
	status  map[uint32]string // the answer's :status, or grpc-status "g<code>", or "reset"
	ended   map[uint32]bool
	end     string // why the reading ended: the server's GOAWAY, the read's error
	done    chan struct{}
}

// newH2flow sends the preface on c and starts reading the server's frames.
func newH2flow(c net.Conn) (*h2flow, error) {
	h := &h2conn{w: bufio.NewWriterSize(c, 64<<10), next: 1}
	h.fr = http2.NewFramer(h.w, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(h.w, http2.ClientPreface)
	h.fr.WriteSettings()
	if err := h.w.Flush(); err != nil {
		return nil, err
	}
	f := &h2flow{h: h, conn: 65535, initial: 65535, window: map[uint32]int64{}, status: map[uint32]string{},
		ended: map[uint32]bool{}, done: make(chan struct{})}
	go f.read()
	return f, nil
}

func (f *h2flow) write(fn func() error) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if err := fn(); err != nil {
		return err
	}
	return f.h.w.Flush()
}

func (f *h2flow) read() {
	defer close(f.done)
	for {
		fr, err := f.h.fr.ReadFrame()
		if err != nil {
			f.mu.Lock()
			f.end += err.Error()
			f.mu.Unlock()
			return
		}
		f.mu.Lock()
		switch fr := fr.(type) {
		case *http2.GoAwayFrame:
			f.end += fmt.Sprintf("GOAWAY %s %q; ", fr.ErrCode, fr.DebugData())
		case *http2.SettingsFrame:
			if !fr.IsAck() {
				if v, ok := fr.Value(http2.SettingInitialWindowSize); ok {
					for id := range f.window {
						f.window[id] += int64(v) - f.initial
					}
					f.initial = int64(v)
				}
				go f.write(f.h.fr.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !fr.IsAck() {
				data := fr.Data
				go f.write(func() error { return f.h.fr.WritePing(true, data) })
			}
		case *http2.WindowUpdateFrame:
			if fr.StreamID == 0 {
				f.conn += int64(fr.Increment)
			} else {
				f.window[fr.StreamID] += int64(fr.Increment)
			}
		case *http2.RSTStreamFrame:
			f.ended[fr.StreamID] = true
			if f.status[fr.StreamID] == "" {
				f.status[fr.StreamID] = "reset"
			}
		case *http2.MetaHeadersFrame:
			if st := fr.PseudoValue("status"); st != "" && f.status[fr.StreamID] == "" {
				f.status[fr.StreamID] = st
			}
			for _, hf := range fr.Fields {
				if hf.Name == "grpc-status" {
					f.status[fr.StreamID] = "g" + hf.Value
				}
			}
			if fr.StreamEnded() {
				f.ended[fr.StreamID] = true
			}
		}
		f.mu.Unlock()
	}
}

// etcdBytes opens bytesCalls Puts on one connection to the etcd door, each announcing
// bytesSize and sending bytesPart of it, and holds them.
func (a *attacker) etcdBytes(ctx context.Context, id, addr string) {
	e := a.etcd
	c, stop, err := a.dialTLS(ctx, e.srcEtcdBytes, addr, []string{"h2"})
	if err != nil {
		return // the node is down, or the attack ended
	}
	defer stop()
	defer c.Close()
	f, err := newH2flow(c)
	if err != nil {
		return
	}
	var ids []uint32
	sent := map[uint32]int{}
	for range bytesCalls {
		var sid uint32
		if f.write(func() (err error) {
			sid, err = f.h.headers(grpcFields(pb.KV_Put_FullMethodName, e.tenantToken, 0), false)
			return err
		}) != nil {
			return
		}
		f.mu.Lock()
		f.window[sid] += f.initial
		f.mu.Unlock()
		ids = append(ids, sid)
		sent[sid] = -5 // the prefix first
		e.etcdCalls.Add(1)
	}
	f.sendParts(ctx, ids, sent)
	select { // hold the calls, unfinished, until the attack ends
	case <-ctx.Done():
	case <-f.done:
	}
	// The answers, counted at the end: on a busy machine they come late.
	f.mu.Lock()
	prefixes, sentBytes, answers := 0, 0, map[string]int{}
	for _, sid := range ids {
		if sent[sid] > 0 {
			prefixes++
			sentBytes += sent[sid]
		}
		answers[f.status[sid]]++
	}
	a.logf("attacker: bytes: etcd Puts on %s: %d of %d prefixes sent, %d KiB, answers %v; the connection: %q",
		id, prefixes, len(ids), sentBytes>>10, answers, f.end)
	for _, sid := range ids {
		switch {
		case f.status[sid] == "g8":
			e.etcdRefused.Add(1)
		case f.ended[sid]:
			e.etcdEnded.Add(1)
		}
	}
	f.mu.Unlock()
}

// sendParts sends each of the calls ids its message's prefix, announcing bytesSize,
// and bytesPart of its body, as the flow windows allow; sent counts each call's bytes
// (-5: none, not even the prefix). Prefixes go first: the calls past the client's
// budget are what the node refuses, at their prefix. It returns when every call has
// its part or has ended, when the connection ends, or after a minute, but not after a
// stall: a node under load, or paused by a fault, grants no window for seconds, and an
// attack that gave up then sent 4 of 150 prefixes and proved nothing. A prefix goes
// whole in one frame (a window of a few bytes waits), as a gRPC client sends it.
func (f *h2flow) sendParts(ctx context.Context, ids []uint32, sent map[uint32]int) {
	chunk := make([]byte, 16384)
	for start := time.Now(); time.Since(start) < time.Minute && ctx.Err() == nil; {
		moved, left := false, false
		for _, prefixes := range []bool{true, false} {
			for _, sid := range ids {
				if sent[sid] < 0 != prefixes {
					continue
				}
				f.mu.Lock()
				if f.ended[sid] || sent[sid] >= bytesPart {
					f.mu.Unlock()
					continue
				}
				left = true
				n := min(int64(len(chunk)), f.conn, f.window[sid], int64(bytesPart-sent[sid]))
				if sent[sid] < 0 && n < 5 {
					n = 0
				}
				f.conn -= max(n, 0)
				f.window[sid] -= max(n, 0)
				f.mu.Unlock()
				if n <= 0 {
					continue
				}
				b := chunk[:n]
				if sent[sid] < 0 {
					b[0] = 0
					binary.BigEndian.PutUint32(b[1:5], bytesSize)
				}
				err := f.write(func() error { return f.h.fr.WriteData(sid, false, b) })
				clear(b[:5])
				if err != nil {
					return
				}
				sent[sid] += int(n)
				moved = true
			}
		}
		if !left {
			return
		}
		if !moved {
			select {
			case <-ctx.Done():
			case <-f.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// httpBytes sends httpBytesConns PUTs announcing httpBytesSize and sending
// httpBytesPart, each on a connection of its own, and holds them.
func (a *attacker) httpBytes(ctx context.Context, addr string) {
	e := a.etcd
	var wg sync.WaitGroup
	body := make([]byte, httpBytesPart)
	for i := range httpBytesConns {
		c, stop, err := a.dialTLS(ctx, e.srcHTTPBytes, addr, []string{"http/1.1"})
		if err != nil {
			e.httpOther.Add(1)
			continue
		}
		e.httpPuts.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			defer c.Close()
			fmt.Fprintf(c, "PUT /v1/kv/%sbytes-%d HTTP/1.1\r\nHost: keel\r\n%s: Bearer %s\r\nContent-Length: %d\r\n\r\n",
				tenantPrefix, i, api.HeaderAuthorization, e.tenantToken, httpBytesSize)
			go c.Write(body) // a refused request's body is not read
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			switch {
			case err == nil && resp.StatusCode == http.StatusTooManyRequests:
				e.httpRefused.Add(1)
			case ctx.Err() == nil:
				e.httpOther.Add(1)
			}
			<-ctx.Done() // hold the connection
		}()
	}
	wg.Wait()
}

// h2cWatches opens the watches of h2cStreams on h2c connections and holds them.
func (a *attacker) h2cWatches(ctx context.Context, id, addr string) {
	e := a.etcd
	var flows []*h2flow
	defer func() {
		var served int64
		for i, f := range flows {
			n := a.h2cTally(f)
			served += n
			if n > maxStreamsPerConn {
				e.bmu.Lock()
				e.h2cPerConn = append(e.h2cPerConn, fmt.Sprintf("%s: %d of %d", id, n, h2cStreams[i]))
				e.bmu.Unlock()
			}
		}
		e.bmu.Lock()
		e.h2cPerNode[id] = max(e.h2cPerNode[id], served)
		e.bmu.Unlock()
	}()
	for k, n := range h2cStreams {
		// The read-only token's watches on the first connection, the tenant's on the
		// others: each token keeps under the 2,000 watches it may hold of a node
		// (-max-watches-per-token), so that the client's 2,500 streams are what the
		// watches run into.
		token, prefix := a.roToken, a.watchPrefix
		if k > 0 {
			token, prefix = e.tenantToken, tenantPrefix
		}
		c, stop, err := a.dialTLS(ctx, e.srcH2C, addr, nil)
		if err != nil {
			return
		}
		defer stop()
		defer c.Close()
		f, err := newH2flow(c)
		if err != nil {
			return
		}
		flows = append(flows, f)
		for i := range n {
			if f.write(func() error {
				_, err := f.h.headers([][2]string{{":method", "GET"}, {":scheme", "https"},
					{":path", fmt.Sprintf("%s%sk%d", api.PathWatch, prefix, i%16)}, {":authority", "keel"},
					{strings.ToLower(api.HeaderAuthorization), "Bearer " + token}}, true)
				return err
			}) != nil {
				break
			}
			e.h2cOpened.Add(1)
		}
	}
	if sleepCtx(ctx, 5*time.Second) { // the answers come
		<-ctx.Done() // hold the watches
	}
}

// h2cTally counts f's streams by their answer and returns those served.
func (a *attacker) h2cTally(f *h2flow) (served int64) {
	e := a.etcd
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range f.status {
		switch st {
		case "200":
			served++
		case "429":
			e.h2cRefused.Add(1)
		case "reset":
			e.h2cReset.Add(1)
		default:
			e.h2cOther.Add(1)
			e.bmu.Lock()
			e.h2cOtherStatus[st]++
			e.bmu.Unlock()
		}
	}
	e.h2cServed.Add(served)
	return served
}

// hugeHeaderLoop tries the huge header list on node id until one try is conclusive.
func (a *attacker) hugeHeaderLoop(ctx context.Context, id, addr string) {
	e := a.etcd
	for range etcdMetadataTries {
		served, how, conclusive := a.hugeHeader(ctx, addr)
		e.bmu.Lock()
		switch {
		case served:
			e.hdrServed = append(e.hdrServed, id+": "+how)
		case conclusive:
			e.hdrRefused = append(e.hdrRefused, id+": "+how)
		default:
			e.hdrInconclusive++
		}
		e.bmu.Unlock()
		if served || conclusive || !sleepCtx(ctx, 2*time.Second) {
			return
		}
	}
}

// hugeHeader sends, on one h2c connection to the HTTP port, a health check with 1 KiB
// of headers, which must be served, then one with h2cHugeHeader bytes (see
// hugeMetadata).
func (a *attacker) hugeHeader(ctx context.Context, addr string) (served bool, how string, conclusive bool) {
	e := a.etcd
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, stop, err := a.dialTLS(hctx, e.srcCalls, addr, nil)
	if err != nil {
		return false, "dial: " + err.Error(), false
	}
	defer stop()
	defer c.Close()
	h := &h2conn{w: bufio.NewWriterSize(c, 64<<10), next: 1}
	h.fr = http2.NewFramer(h.w, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(h.w, http2.ClientPreface)
	h.fr.WriteSettings()
	// The pad in 1 KiB fields: the list is over the bound, not one field (x/net's
	// decoder also bounds a string by the list's bound, and ends the connection).
	get := func(pad int) (uint32, error) {
		fields := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", api.PathHealth}, {":authority", "keel"}}
		for i := 0; i < pad; i += 1 << 10 {
			fields = append(fields, [2]string{fmt.Sprintf("x-pad-%d", i>>10), strings.Repeat("p", min(pad-i, 1<<10))})
		}
		id, err := h.headers(fields, true)
		if err != nil {
			return id, err
		}
		return id, h.w.Flush()
	}
	id, err := get(1 << 10)
	if err != nil {
		return false, "write: " + err.Error(), false
	}
	if ok, how := h.answer(id); !ok {
		return false, "the 1 KiB control was not served: " + how, false
	}
	if id, err = get(h2cHugeHeader); err != nil {
		return false, "write: " + err.Error(), true // the server closed the connection while it came
	}
	served, how = h.answer(id)
	return served, how, served || !strings.Contains(how, "timeout")
}

// checkBytes is the part of checkEtcd for the attacks above; e.mu is held.
func (a *attacker) checkBytes(add func(string, ...any)) {
	if !bytesAttacks() {
		return
	}
	e := a.etcd
	e.bmu.Lock()
	defer e.bmu.Unlock()
	a.logf("attacker: bytes: etcd Puts announcing %d KiB, %d KiB sent: %d opened, %d refused (ResourceExhausted), %d ended otherwise; "+
		"HTTP PUTs announcing %d KiB, %d KiB sent: %d sent, %d refused (429), %d otherwise",
		bytesSize>>10, bytesPart>>10, e.etcdCalls.Load(), e.etcdRefused.Load(), e.etcdEnded.Load(),
		httpBytesSize>>10, httpBytesPart>>10, e.httpPuts.Load(), e.httpRefused.Load(), e.httpOther.Load())
	a.logf("attacker: h2c: watches %d opened, %d served, %d refused (429), %d reset, %d other %v; served per node %v; "+
		"huge header list refused %q, served %q, %d tries inconclusive",
		e.h2cOpened.Load(), e.h2cServed.Load(), e.h2cRefused.Load(), e.h2cReset.Load(), e.h2cOther.Load(), e.h2cOtherStatus, e.h2cPerNode,
		e.hdrRefused, e.hdrServed, e.hdrInconclusive)
	if e.etcdRefused.Load() == 0 {
		add("no etcd Put over the client's request bytes in flight was refused (%d opened): the attack proved nothing", e.etcdCalls.Load())
	}
	if e.httpRefused.Load() == 0 {
		add("no HTTP PUT over the client's request bytes in flight was refused (%d sent): the attack proved nothing", e.httpPuts.Load())
	}
	if e.h2cServed.Load() == 0 || e.h2cRefused.Load()+e.h2cReset.Load() == 0 {
		add("h2c watches: %d served, %d refused, %d reset: the attack proved nothing", e.h2cServed.Load(), e.h2cRefused.Load(), e.h2cReset.Load())
	}
	for _, s := range e.h2cPerConn {
		add("one h2c connection carried more than %d watches: %s", maxStreamsPerConn, s)
	}
	for id, n := range e.h2cPerNode {
		if n > maxStreamsPerClient {
			add("node %s served %d h2c watches of one client, over its %d connections and streams", id, n, maxStreamsPerClient)
		}
	}
	for _, s := range e.hdrServed {
		add("an h2c request with %d KiB of headers was served by %s", h2cHugeHeader>>10, s)
	}
	if len(e.hdrRefused) == 0 {
		add("no node answered the h2c request with a huge header list conclusively (%d tries)", e.hdrInconclusive)
	}
}
