package kv

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
)

// The stream protocol (see api/stream.go): single-key reads and writes as binary
// frames on one upgraded connection, many in flight, answers coalesced into few
// writes. Each request runs the same code as its HTTP route (getKey, putKey,
// deleteKey), so the two differ only in framing.

const (
	// streamWriteTimeout bounds one flush to a client that stopped reading.
	streamWriteTimeout = 30 * time.Second
	streamBufSize      = 64 << 10
	// streamWorkerIdle: how long a connection's idle worker goroutine waits for the
	// next request before it exits.
	streamWorkerIdle = 10 * time.Second
)

// handleStream upgrades GET /v1/stream to the stream protocol.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) error {
	if !api.HeaderHasToken(r.Header, "Connection", "upgrade") || !api.HeaderHasToken(r.Header, "Upgrade", api.StreamProtocol) {
		return fmt.Errorf("%w: %s needs Connection: Upgrade and Upgrade: %s", ErrInvalidParam, api.PathStream, api.StreamProtocol)
	}
	s.streams.Lock()
	closed := s.streams.closed
	s.streams.Unlock()
	if closed {
		return fmt.Errorf("%w: shutting down", raft.ErrShutdown)
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("stream: hijack: %w", err)
	}
	// The HTTP server's deadlines belong to the request; the stream sets its own.
	conn.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.StreamProtocol +
		"\r\n" + api.HeaderStreamFeatures + ": " + streamFeatures + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return nil // the status line is out (hijacked): nothing more to answer
	}
	c := s.newStreamConn(conn, brw.Reader, authzOf(r.Context()))
	if c == nil {
		conn.Close()
		return nil
	}
	c.watches.shared = api.HeaderHasToken(r.Header, api.HeaderStreamFeatures, api.StreamFeatureSharedEvents)
	go c.serve()
	return nil
}

// streamFeatures is what this server offers beyond the protocol's first release.
var streamFeatures = strings.Join([]string{api.StreamFeatureSharedEvents, api.StreamFeatureLeases,
	api.StreamFeatureRequireLeader, api.StreamFeatureTxn}, ", ")

// leaderContact is nil while the node has leader contact (always, for a store that
// cannot lose it), and says why not otherwise.
func (s *Server) leaderContact() error {
	if lc, ok := s.store.(interface{ LeaderContact() error }); ok {
		return lc.LeaderContact()
	}
	return nil
}

type streamConn struct {
	s      *Server
	conn   net.Conn
	src    string // the client's address, for the per-client request bound
	br     *bufio.Reader
	ctx    context.Context
	cancel context.CancelFunc
	sem    chan struct{}
	work   chan *api.StreamRequest // to idle workers (unbuffered)
	wg     sync.WaitGroup          // requests in flight
	flush  chan struct{}           // cap 1: a flush is wanted
	wmu    sync.Mutex
	bw     *bufio.Writer
	werr   error // first write failure; later answers are dropped

	watches streamWatches // stream_watch.go
}

// newStreamConn registers a stream with the server (so Shutdown closes it); nil once
// the server is shutting down. Every request of the stream runs with the rights of
// az, the token of the upgrade request (nil: ACLs not enforced).
func (s *Server) newStreamConn(conn net.Conn, br *bufio.Reader, az *acl.Authorizer) *streamConn {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), authzKey{}, az))
	c := &streamConn{s: s, conn: conn, src: sourceOf(conn), br: br, ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, s.cfg.MaxStreamInFlight), work: make(chan *api.StreamRequest), flush: make(chan struct{}, 1),
		bw: bufio.NewWriterSize(conn, streamBufSize)}
	s.streams.Lock()
	defer s.streams.Unlock()
	if s.streams.closed {
		cancel()
		return nil
	}
	if s.streams.conns == nil {
		s.streams.conns = map[*streamConn]struct{}{}
	}
	s.streams.conns[c] = struct{}{}
	s.streams.wg.Add(1)
	return c
}

// closeStreams stops every stream from reading new requests, lets the requests in
// flight finish and be answered until ctx is done, then closes what is left.
func (s *Server) closeStreams(ctx context.Context) error {
	s.streams.Lock()
	s.streams.closed = true
	conns := make([]*streamConn, 0, len(s.streams.conns))
	for c := range s.streams.conns {
		conns = append(conns, c)
	}
	s.streams.Unlock()
	for _, c := range conns {
		c.conn.SetReadDeadline(time.Now())
	}
	done := make(chan struct{})
	go func() { s.streams.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.cancel()
			c.conn.Close()
		}
		return ctx.Err()
	}
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
		c.s.streams.Lock()
		delete(c.s.streams.conns, c)
		c.s.streams.Unlock()
		c.s.streams.wg.Done()
	}()
	max := int(max(c.s.cfg.MaxValueBytes+int64(c.s.cfg.MaxKeyBytes), c.s.cfg.MaxTxnBodyBytes)) + 64
	for {
		body, err := c.readFrame(max)
		var tooLarge *api.ErrStreamFrameTooLarge
		switch {
		case errors.As(err, &tooLarge):
			if !c.refuseLarge(tooLarge.Size) {
				return
			}
			continue
		case err != nil:
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.s.log.Debug("stream: closing connection", "remote", c.conn.RemoteAddr().String(), "error", err)
			}
			return
		}
		var req api.StreamRequest
		if err := api.DecodeStreamRequest(body, &req); err != nil {
			if _, n := binary.Uvarint(body); n <= 0 {
				// No id to answer: the client is not speaking this protocol.
				c.s.log.Debug("stream: unreadable request", "remote", c.conn.RemoteAddr().String(), "error", err)
				return
			}
			c.answer(&api.StreamResponse{ID: req.ID, Op: req.Op, Err: &api.Error{Code: http.StatusBadRequest,
				Reason: api.ReasonBadRequest, Message: err.Error()}})
			continue
		}
		if req.Op == api.StreamWatch || req.Op == api.StreamWatchCancel {
			c.watchFrame(&req)
			continue
		}
		select {
		case c.sem <- struct{}{}:
		case <-c.ctx.Done():
			return
		}
		if !c.s.acquireRequest(c.src) {
			<-c.sem
			e := errorBody(c.s.tooManyRequests(), req.Op != api.StreamGet)
			c.answer(&api.StreamResponse{ID: req.ID, Op: req.Op, Err: &e})
			continue
		}
		c.wg.Add(1)
		c.dispatch(&req)
	}
}

// dispatch hands req to an idle worker of this connection, or starts one. Workers
// outlive their request: a goroutine per request would grow a fresh stack through
// the whole write path every time (a tenth of the leader's CPU under load).
func (c *streamConn) dispatch(req *api.StreamRequest) {
	select {
	case c.work <- req:
	default:
		go c.worker(req)
	}
}

// worker runs requests until it has been idle for streamWorkerIdle or the connection
// closes.
func (c *streamConn) worker(req *api.StreamRequest) {
	idle := time.NewTimer(streamWorkerIdle)
	defer idle.Stop()
	for {
		resp := c.s.streamDo(c.ctx, req)
		c.answer(&resp)
		c.s.releaseRequest(c.src)
		<-c.sem
		c.wg.Done()
		idle.Reset(streamWorkerIdle)
		select {
		case req = <-c.work:
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
// the protocol (which read as a frame that never completes), is cut off.
func (c *streamConn) readFrame(max int) ([]byte, error) {
	if _, err := c.br.Peek(1); err != nil {
		return nil, err
	}
	c.setReadDeadline(time.Now().Add(c.s.cfg.StreamFrameTimeout))
	body, err := api.ReadStreamFrame(c.br, max)
	c.setReadDeadline(time.Time{})
	return body, err
}

// setReadDeadline sets the read deadline unless the server is shutting down, which
// has set its own (closeStreams sets closed first, then the deadlines).
func (c *streamConn) setReadDeadline(t time.Time) {
	c.s.streams.Lock()
	defer c.s.streams.Unlock()
	if c.s.streams.closed {
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
	c.setReadDeadline(time.Now().Add(c.s.cfg.StreamFrameTimeout))
	defer c.setReadDeadline(time.Time{})
	head, _ := c.br.Peek(min(int(size), binary.MaxVarintLen64))
	id, n := binary.Uvarint(head)
	if n <= 0 {
		return false
	}
	if _, err := c.br.Discard(int(size)); err != nil {
		return false
	}
	c.answer(&api.StreamResponse{ID: id, Err: &api.Error{Code: http.StatusRequestEntityTooLarge, Reason: api.ReasonTooLarge,
		Message: fmt.Sprintf("request of %d bytes exceeds the limit (value %d bytes, key %d bytes)",
			size, c.s.cfg.MaxValueBytes, c.s.cfg.MaxKeyBytes)}})
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

// streamDo runs one request through the same code as its HTTP route.
func (s *Server) streamDo(ctx context.Context, req *api.StreamRequest) api.StreamResponse {
	resp := api.StreamResponse{ID: req.ID, Op: req.Op}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	var err error
	if az := authzOf(ctx); az != nil {
		// The connection's token, with the rights it holds now.
		if az, err = s.current(az); err == nil {
			ctx = context.WithValue(ctx, authzKey{}, az)
		}
	}
	if err == nil {
		err = s.streamOp(ctx, req, &resp)
	}
	if err != nil {
		e := errorBody(err, req.Op != api.StreamGet)
		if e.Code == http.StatusInternalServerError {
			s.log.Error("stream request failed", "op", req.Op.String(), "error", err)
		}
		resp.Err = &e
	}
	if m := s.streamMetrics; m != nil {
		code := http.StatusOK
		if resp.Err != nil {
			code = resp.Err.Code
		}
		m.observe(req.Op, code, time.Since(start))
	}
	return resp
}

func (s *Server) streamOp(ctx context.Context, req *api.StreamRequest, resp *api.StreamResponse) error {
	if (req.Op == api.StreamLeaseKeepAlive || req.Op == api.StreamLeaseRevoke) && req.LeaseID > api.MaxLeaseID {
		return fmt.Errorf("%w: lease ID %d must be in [1, %d]", ErrInvalidParam, req.LeaseID, int64(api.MaxLeaseID))
	}
	switch req.Op {
	case api.StreamTxn:
		return s.streamTxn(ctx, req, resp)
	case api.StreamLeaseGrant:
		id, err := s.grantLease(ctx, req.LeaseID, int64(req.TTL/time.Second))
		resp.LeaseID, resp.TTL = id, req.TTL
		return err
	case api.StreamLeaseKeepAlive:
		left, err := s.keepAliveLease(ctx, req.LeaseID)
		resp.LeaseID, resp.TTL = req.LeaseID, left
		return err
	case api.StreamLeaseRevoke:
		r, err := s.revokeLease(ctx, req.LeaseID)
		resp.Revision, resp.Deleted = r.Revision, r.Deleted
		return err
	}
	key := string(req.Key)
	if err := s.lim.checkKey(key); err != nil {
		return err
	}
	switch req.Op {
	case api.StreamGet:
		cons := fsm.Linearizable
		if req.Serializable {
			cons = fsm.Serializable
		}
		kv, rev, err := s.getKey(ctx, key, req.Revision, cons)
		if err != nil {
			return err
		}
		resp.Revision, resp.KV = rev, toAPI(kv)
	case api.StreamPut:
		if err := s.lim.checkValue(len(req.Value)); err != nil {
			return err
		}
		prev := int64(-1)
		if req.HasPrev {
			prev = req.PrevRevision
		}
		if req.LeaseID > api.MaxLeaseID {
			return fmt.Errorf("%w: lease %d above %d", ErrInvalidParam, req.LeaseID, int64(api.MaxLeaseID))
		}
		rev, err := s.putKey(ctx, key, req.Value, prev, req.LeaseID)
		if err != nil {
			return err
		}
		resp.Revision = rev
	case api.StreamDelete:
		prev := int64(0)
		if req.HasPrev {
			if req.PrevRevision < 1 {
				return fmt.Errorf("%w: prev_revision of a delete must be at least 1", ErrInvalidParam)
			}
			prev = req.PrevRevision
		}
		d, err := s.deleteKey(ctx, key, false, prev)
		if err != nil {
			return err
		}
		resp.Revision, resp.Deleted = d.Revision, d.Deleted
	}
	return nil
}

// streamTxn runs a transaction sent over the stream: the body and the answer of POST
// /v1/txn. An answer too large for a frame (ranged gets of many large values) is
// refused with a 413 when the transaction only read (the client asks again over
// HTTP); a transaction that wrote says at which revision it was applied.
func (s *Server) streamTxn(ctx context.Context, req *api.StreamRequest, resp *api.StreamResponse) error {
	if int64(len(req.Value)) > s.cfg.MaxTxnBodyBytes {
		return fmt.Errorf("%w: txn body of %d bytes (at most %d)", ErrTooLarge, len(req.Value), s.cfg.MaxTxnBodyBytes)
	}
	txn, res, err := s.runTxn(ctx, req.Value)
	if err != nil {
		return err
	}
	body, err := json.Marshal(txnResponse(res))
	if err != nil {
		return fmt.Errorf("txn answer: %w", err)
	}
	if len(body) > api.MaxStreamFrame-64 {
		if !txnWrites(txn) {
			return fmt.Errorf("%w: the answer of %d bytes does not fit a stream frame: ask over HTTP", ErrTooLarge, len(body))
		}
		return fmt.Errorf("txn applied at revision %d, but its answer of %d bytes does not fit a stream frame",
			res.Revision, len(body))
	}
	resp.Revision, resp.Body = res.Revision, body
	return nil
}

// txnWrites reports whether txn has an op that may change state.
func txnWrites(txn *fsm.Txn) bool {
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, op := range ops {
			if op.Type != fsm.OpGet {
				return true
			}
		}
	}
	return false
}

// streamMetrics counts stream requests by op and status and measures their latency
// (keel_stream_requests_total, keel_stream_request_duration_seconds).
type streamMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func (m *streamMetrics) observe(op api.StreamOp, code int, d time.Duration) {
	m.requests.WithLabelValues(op.String(), strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(op.String()).Observe(d.Seconds())
}
