package stream

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// The stream protocol (see api/stream.go): single-key reads and writes as binary
// frames on one upgraded connection, many in flight, answers coalesced into few
// writes. Each request is one call of the core (Get, Put, Delete, Txn, the lease
// operations), the calls the HTTP routes make, so the two differ only in framing.

const (
	// streamWriteTimeout bounds one flush to a client that stopped reading.
	streamWriteTimeout = 30 * time.Second
	streamBufSize      = 64 << 10
	// streamWorkerIdle: how long a connection's idle worker goroutine waits for the
	// next request before it exits.
	streamWorkerIdle = 10 * time.Second
)

type streamConn struct {
	d      *Door
	caller kv.Caller // the token of the upgrade request
	// peer returns the upgrade request's TLS session (nil on a plain-text port), for
	// the core's client-certificate rule, checked again at every request and watch: a
	// certificate revoked after the upgrade is refused from then on.
	peer   func() *tls.ConnectionState
	conn   net.Conn
	src    string // the client's address, for the per-client request bound
	br     *bufio.Reader
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	work   chan streamJob // to idle workers (unbuffered)
	wg     sync.WaitGroup // requests in flight
	flush  chan struct{}  // cap 1: a flush is wanted
	wmu    sync.Mutex
	bw     *bufio.Writer
	werr   error // first write failure; later answers are dropped

	watches streamWatches // stream_watch.go
}

// newStreamConn registers a stream with the door (so Close closes it); nil once the
// door is closing. Every request of the stream runs for caller, the token of the
// upgrade request.
func (d *Door) newStreamConn(conn net.Conn, br *bufio.Reader, caller kv.Caller, cs *tls.ConnectionState) *streamConn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &streamConn{d: d, caller: caller, peer: func() *tls.ConnectionState { return cs }, conn: conn, src: conn.RemoteAddr().String(), br: br, ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, d.cfg.MaxStreamInFlight), work: make(chan streamJob),
		flush: make(chan struct{}, 1), bw: bufio.NewWriterSize(conn, streamBufSize)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		cancel()
		return nil
	}
	if d.conns == nil {
		d.conns = map[*streamConn]struct{}{}
	}
	d.conns[c] = struct{}{}
	d.wg.Add(1)
	return c
}

func (c *streamConn) serve() {
	flushDone := make(chan struct{})
	go c.flusher(flushDone)
	defer func() {
		c.stopWatches()
		c.wg.Wait()
		c.cancel()
		<-flushDone
		c.wmu.Lock()
		if c.werr == nil {
			c.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
			c.bw.Flush()
		}
		c.wmu.Unlock()
		c.conn.Close()
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
		c.d.wg.Done()
	}()
	max := int(c.d.cfg.MaxRequestBytes()) + 64
	for {
		body, release, err := c.readFrame(max)
		var tooLarge *api.ErrStreamFrameTooLarge
		var refused *frameRefused
		switch {
		case errors.As(err, &tooLarge):
			if !c.refuseLarge(tooLarge.Size) {
				return
			}
			continue
		case errors.As(err, &refused):
			if !c.refuseFrame(uint64(refused.size), refused.err) {
				return
			}
			continue
		case err != nil:
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.d.core.Logger().Debug("stream: closing connection", "remote", c.conn.RemoteAddr().String(), "error", err)
			}
			return
		}
		var req api.StreamRequest
		if err := api.DecodeStreamRequest(body, &req); err != nil {
			release()
			if _, n := binary.Uvarint(body); n <= 0 {
				// No id to answer: the client is not speaking this protocol.
				c.d.core.Logger().Debug("stream: unreadable request", "remote", c.conn.RemoteAddr().String(), "error", err)
				return
			}
			e := kv.WireError(fmt.Errorf("%w: %v", kv.ErrInvalidBody, err), false)
			c.answer(&api.StreamResponse{ID: req.ID, Op: req.Op, Err: &e})
			continue
		}
		if req.Op == api.StreamWatch || req.Op == api.StreamWatchCancel {
			release()
			c.watchFrame(&req)
			continue
		}
		select {
		case c.sem <- struct{}{}:
		case <-c.ctx.Done():
			release()
			return
		}
		if err := c.d.core.AdmitRequest(c.src); err != nil {
			release()
			<-c.sem
			e := kv.WireError(err, req.Op != api.StreamGet)
			c.answer(&api.StreamResponse{ID: req.ID, Op: req.Op, Err: &e})
			continue
		}
		c.wg.Add(1)
		c.dispatch(streamJob{req: &req, release: release})
	}
}

// streamJob is a request to run and the release of its bytes in flight.
type streamJob struct {
	req     *api.StreamRequest
	release func()
}

// dispatch hands req to an idle worker of this connection, or starts one. Workers
// outlive their request: a goroutine per request would grow a fresh stack through
// the whole write path every time (a tenth of the leader's CPU under load).
func (c *streamConn) dispatch(job streamJob) {
	select {
	case c.work <- job:
	default:
		go c.worker(job)
	}
}

// worker runs requests until it has been idle for streamWorkerIdle or the connection
// closes.
func (c *streamConn) worker(job streamJob) {
	idle := time.NewTimer(streamWorkerIdle)
	defer idle.Stop()
	for {
		resp := c.do(job.req)
		job.release()
		c.answer(&resp)
		c.d.core.ReleaseRequest(c.src)
		<-c.sem
		c.wg.Done()
		idle.Reset(streamWorkerIdle)
		select {
		case job = <-c.work:
		case <-idle.C:
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// readFrame reads the next frame: it waits for the first byte as long as the client
// likes (an idle connection is fine), then the whole frame must arrive within
// StreamFrameTimeout — a client that stalls mid-frame, or sends bytes that are not
// the protocol (which read as a frame that never completes), is cut off. The frame
// takes its length from the client's request bytes in flight before its body is read
// (kv.Server.AdmitBytes); release gives them back. One over the budget is
// *frameRefused, its body unread.
func (c *streamConn) readFrame(max int) (body []byte, release func(), err error) {
	if _, err := c.br.Peek(1); err != nil {
		return nil, nil, err
	}
	c.setReadDeadline(time.Now().Add(c.d.cfg.StreamFrameTimeout))
	defer c.setReadDeadline(time.Time{})
	n, err := api.ReadStreamFrameLen(c.br, max)
	if err != nil {
		return nil, nil, err
	}
	if release, err = c.d.core.AdmitBytes(c.src, int64(n)); err != nil {
		return nil, nil, &frameRefused{size: n, err: err}
	}
	if body, err = api.ReadStreamFrameBody(c.br, n); err != nil {
		release()
		return nil, nil, err
	}
	return body, release, nil
}

// frameRefused: a frame of size bytes the server will not read, for err.
type frameRefused struct {
	size int
	err  error
}

func (e *frameRefused) Error() string { return e.err.Error() }

// setReadDeadline sets the read deadline unless the server is shutting down, which
// has set its own (Door.Close sets closed first, then the deadlines).
func (c *streamConn) setReadDeadline(t time.Time) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.closed {
		return
	}
	c.conn.SetReadDeadline(t)
}

// refuseLarge answers a frame over the limit with a 413 for its id and skips it; it
// reports whether the connection can go on.
func (c *streamConn) refuseLarge(size uint64) bool {
	if size > api.MaxStreamFrame {
		return false // no client sends such a frame: these bytes are not the protocol
	}
	return c.refuseFrame(size, fmt.Errorf("%w: request of %d bytes exceeds the limit (value %d bytes, key %d bytes, txn body %d bytes)",
		kv.ErrTooLarge, size, c.d.cfg.MaxValueBytes, c.d.cfg.MaxKeyBytes, c.d.cfg.MaxTxnBodyBytes))
}

// refuseFrame skips the unread body of a frame of size bytes and answers its id with
// why; it reports whether the connection can go on.
func (c *streamConn) refuseFrame(size uint64, why error) bool {
	c.setReadDeadline(time.Now().Add(c.d.cfg.StreamFrameTimeout))
	defer c.setReadDeadline(time.Time{})
	head, _ := c.br.Peek(min(int(size), binary.MaxVarintLen64))
	id, n := binary.Uvarint(head)
	if n <= 0 {
		return false
	}
	if _, err := c.br.Discard(int(size)); err != nil {
		return false
	}
	e := kv.WireError(why, false)
	c.answer(&api.StreamResponse{ID: id, Err: &e})
	return true
}

// answer queues resp; the flusher writes queued answers out together.
func (c *streamConn) answer(resp *api.StreamResponse) {
	c.wmu.Lock()
	if c.werr == nil {
		_, c.werr = c.bw.Write(api.AppendStreamResponse(c.bw.AvailableBuffer(), resp))
	}
	c.wmu.Unlock()
	select {
	case c.flush <- struct{}{}:
	default:
	}
}

func (c *streamConn) flusher(done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-c.flush:
		case <-c.ctx.Done():
			return
		}
		// Answers finish in bursts (a Raft commit releases a batch of writes at once):
		// let the rest of the burst queue up, then send it in one write.
		runtime.Gosched()
		c.wmu.Lock()
		if c.werr == nil && c.bw.Buffered() > 0 {
			c.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
			c.werr = c.bw.Flush()
		}
		failed := c.werr != nil
		c.wmu.Unlock()
		if failed {
			c.conn.Close() // the reader stops; serve cleans up
			return
		}
	}
}
