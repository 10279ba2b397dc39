package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// The stream protocol (api/stream.go) carries single-key Get, Put and Delete as binary
// frames over one connection per node, many requests in flight. Options.Stream turns
// it on; a node that does not offer it (an older release) is used over HTTP.

// errStreamLost: the connection broke after the request was sent; a write's outcome
// is unknown.
var errStreamLost = errors.New("client: stream connection lost")

// notSentError wraps a failure that proves the request never left this client.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// errNoStream: the node answered the upgrade with something else (it predates the
// stream protocol); the request goes over HTTP instead.
var errNoStream = errors.New("client: node does not offer the stream protocol")

type streamResult struct {
	resp api.StreamResponse
	err  error
}

// streamConn is one stream-protocol connection.
type streamConn struct {
	conn  net.Conn
	flush chan struct{}
	done  chan struct{} // closed when the connection is dead
	// leases: the node serves the lease ops (api.StreamFeatureLeases in its upgrade
	// answer); a node of an older release is asked over HTTP.
	leases bool
	// requireLeader: the node takes api.StreamFlagRequireLeader on watches.
	requireLeader bool
	// txn: the node serves api.StreamTxn.
	txn bool

	wmu sync.Mutex
	bw  *bufio.Writer

	mu      sync.Mutex
	pending map[uint64]chan streamResult
	watches map[uint64]*watchSub // stream_watch.go
	nextID  uint64
	err     error // why the connection died
}

// dialStream connects to the node at base (http://host:port, or https://host:port
// with tlsCfg) and upgrades. A token, when set, authenticates the whole connection
// (Authorization on the upgrade). A refused upgrade (401/403 included) is
// errNoStream: the request then goes over HTTP, whose answer says why.
func dialStream(ctx context.Context, base string, timeout time.Duration, tlsCfg *tls.Config, token string) (*streamConn, error) {
	host, secure := strings.CutPrefix(base, "https://")
	if !secure {
		host = strings.TrimPrefix(base, "http://")
	}
	d := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	var conn net.Conn
	var err error
	if secure {
		cfg := tlsCfg.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		cfg.NextProtos = []string{"http/1.1"}
		conn, err = (&tls.Dialer{NetDialer: &d, Config: cfg}).DialContext(ctx, "tcp", host)
	} else {
		conn, err = d.DialContext(ctx, "tcp", host)
	}
	if err != nil {
		return nil, &notSentError{fmt.Errorf("client: stream to %s: %w", host, err)}
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(timeout))
	}
	req, _ := http.NewRequest(http.MethodGet, base+api.PathStream, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.StreamProtocol)
	req.Header.Set(api.HeaderStreamFeatures, api.StreamFeatureSharedEvents)
	if token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+token)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	fail := func(err error) (*streamConn, error) {
		conn.Close()
		return nil, &notSentError{fmt.Errorf("client: stream to %s: %w", host, err)}
	}
	if err := req.Write(conn); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			return nil, &notSentError{fmt.Errorf("client: stream to %s: %s", host, resp.Status)}
		}
		return nil, errNoStream
	}
	conn.SetDeadline(time.Time{})
	c := &streamConn{conn: conn, flush: make(chan struct{}, 1), done: make(chan struct{}),
		bw: bufio.NewWriterSize(conn, 64<<10), pending: map[uint64]chan streamResult{},
		leases:        api.HeaderHasToken(resp.Header, api.HeaderStreamFeatures, api.StreamFeatureLeases),
		requireLeader: api.HeaderHasToken(resp.Header, api.HeaderStreamFeatures, api.StreamFeatureRequireLeader),
		txn:           api.HeaderHasToken(resp.Header, api.HeaderStreamFeatures, api.StreamFeatureTxn)}
	go c.readLoop(br)
	go c.flusher()
	return c, nil
}

// do sends req and waits for its answer. An *api.Error is the server's answer.
func (c *streamConn) do(ctx context.Context, req *api.StreamRequest) (*api.StreamResponse, error) {
	ch := make(chan streamResult, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, &notSentError{err}
	}
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = ch
	c.mu.Unlock()

	c.wmu.Lock()
	_, err := c.bw.Write(api.AppendStreamRequest(c.bw.AvailableBuffer(), req))
	c.wmu.Unlock()
	if err != nil {
		c.fail(err)
	}
	select {
	case c.flush <- struct{}{}:
	default:
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		if r.resp.Err != nil {
			return nil, r.resp.Err
		}
		return &r.resp, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (c *streamConn) flusher() {
	for {
		select {
		case <-c.flush:
		case <-c.done:
			return
		}
		runtime.Gosched() // let concurrent requests join this write
		c.wmu.Lock()
		err := c.bw.Flush()
		c.wmu.Unlock()
		if err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *streamConn) readLoop(br *bufio.Reader) {
	for {
		body, err := api.ReadStreamFrame(br, api.MaxStreamFrame)
		if err != nil {
			c.fail(err)
			return
		}
		var r streamResult
		if err := api.DecodeStreamResponse(body, &r.resp); err != nil {
			c.fail(err)
			return
		}
		if r.resp.Op == api.StreamWatch {
			resp := new(api.StreamResponse) // shared by the watches of a shared frame
			*resp = r.resp
			c.deliverWatch(resp.ID, resp)
			for _, id := range resp.Shared { // one decoding for all
				c.deliverWatch(id, resp)
			}
			continue
		}
		c.mu.Lock()
		ch, ok := c.pending[r.resp.ID]
		delete(c.pending, r.resp.ID)
		c.mu.Unlock()
		if ok {
			ch <- r
		}
	}
}

// fail marks the connection dead and fails every request in flight.
func (c *streamConn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = fmt.Errorf("%w: %v", errStreamLost, err)
	close(c.done)
	c.conn.Close()
	for id, ch := range c.pending {
		ch <- streamResult{err: c.err}
		delete(c.pending, id)
	}
	c.failWatchesLocked()
}

func (c *streamConn) close() { c.fail(net.ErrClosed) }

// streamNode is the stream state of one node address.
type streamNode struct {
	mu    sync.Mutex
	conn  *streamConn
	noStr time.Time // when the node last refused the upgrade; HTTP is used for a while
}

// noStreamRecheck: how long a node that refused the upgrade is served over HTTP
// before the client asks again (it may have been upgraded meanwhile).
const noStreamRecheck = time.Minute

// streamTo returns a live stream connection to base, dialing when needed;
// errNoStream when the node does not offer the protocol.
func (c *Client) streamTo(ctx context.Context, base string) (*streamConn, error) {
	c.streamsMu.Lock()
	n := c.streams[base]
	if n == nil {
		n = &streamNode{}
		c.streams[base] = n
	}
	c.streamsMu.Unlock()

	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn != nil {
		select {
		case <-n.conn.done:
			n.conn = nil
		default:
			return n.conn, nil
		}
	}
	if !n.noStr.IsZero() && time.Since(n.noStr) < noStreamRecheck {
		return nil, errNoStream
	}
	conn, err := dialStream(ctx, base, c.opts.DialTimeout, c.opts.TLS, c.opts.Token)
	if errors.Is(err, errNoStream) {
		n.noStr = time.Now()
	}
	if err != nil {
		return nil, err
	}
	n.conn, n.noStr = conn, time.Time{}
	return conn, nil
}

// Close closes the client's stream connections (HTTP connections are the
// HTTPClient's). The client remains usable; it reconnects on the next request.
func (c *Client) Close() error {
	c.streamsMu.Lock()
	defer c.streamsMu.Unlock()
	for _, n := range c.streams {
		n.mu.Lock()
		if n.conn != nil {
			n.conn.close()
			n.conn = nil
		}
		n.mu.Unlock()
	}
	return nil
}

// doStream sends req over the stream protocol with the retry rules of do; when the
// chosen node does not offer the protocol, fallback (the same request over HTTP)
// answers instead.
func (c *Client) doStream(ctx context.Context, req api.StreamRequest, fallback func() error) (*api.StreamResponse, error) {
	// A keepalive is idempotent: retried like a read.
	return c.doStreamAs(ctx, req, req.Op != api.StreamGet && req.Op != api.StreamLeaseKeepAlive, fallback)
}

// doStreamAs is doStream for a request that changes state when write is set (retried
// only when it provably did not run), or that only reads.
func (c *Client) doStreamAs(ctx context.Context, req api.StreamRequest, write bool, fallback func() error) (*api.StreamResponse, error) {
	var resp *api.StreamResponse
	leaseOp := req.HasLease || req.Op == api.StreamLeaseGrant || req.Op == api.StreamLeaseKeepAlive || req.Op == api.StreamLeaseRevoke
	err := c.retry(ctx, write, func(base string) (time.Duration, error) {
		sc, err := c.streamTo(ctx, base)
		if err != nil {
			return 0, err
		}
		if leaseOp && !sc.leases || req.Op == api.StreamTxn && !sc.txn {
			return 0, errNoStream // this node's stream predates the op: over HTTP
		}
		r := req
		resp, err = sc.do(ctx, &r)
		return 0, err
	})
	if errors.Is(err, errNoStream) { // not retried: it is no failure of the node
		return nil, fallback()
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}
