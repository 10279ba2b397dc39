package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Options configures a Client. The zero value is usable: every zero field takes the
// default named on it.
type Options struct {
	// HTTPClient sends the requests; default: a client with its own Transport tuned
	// for many concurrent requests to a few nodes (see MaxIdleConnsPerHost).
	HTTPClient *http.Client
	// MaxIdleConnsPerHost bounds the idle keep-alive connections kept per node
	// (default 256) when HTTPClient is nil.
	MaxIdleConnsPerHost int
	// DialTimeout bounds connecting to a node (default 5s) when HTTPClient is nil.
	DialTimeout time.Duration
	// MaxRetries is how many times a failed request is repeated when that is safe
	// (default 8; negative = never).
	MaxRetries int
	// MinBackoff and MaxBackoff bound the jittered exponential wait between retries
	// (defaults 25ms and 1s).
	MinBackoff, MaxBackoff time.Duration
	// NoLeaderBudget bounds how long a request goes on once a node answered 503
	// NoLeader (it waited for a leader for a moment, raft.Config.LeaderWait, and saw
	// none): other nodes are tried, and the request again after the server's
	// Retry-After, until this long after that first answer; then the request fails
	// with the NoLeader answer (not with a later node's refused connection). 0: no
	// bound but MaxRetries, which rides out a long election; the CLI uses one second,
	// the server's Retry-After, so that a cluster without quorum fails fast.
	NoLeaderBudget time.Duration
	// Stream sends single-key Get, Put and Delete (CAS included) and every Watch over
	// the stream protocol: one binary connection per node with many requests and
	// watches in flight, much cheaper per request and per watch than HTTP for both
	// sides. Lists, transactions and the rest stay on HTTP, and so does everything for
	// a node that does not offer the protocol (an older release); a node whose
	// stream protocol predates watches serves watches over HTTP. Call Close when done
	// with the client.
	Stream bool
	// TLS configures https:// addresses (the cluster CA in RootCAs, and a client
	// certificate when the nodes verify clients); nil: the system roots. A bare
	// "host:port" address becomes https:// when TLS is set. Ignored when HTTPClient
	// is given.
	TLS *tls.Config
	// Token is the ACL token's secret, sent as `Authorization: Bearer <Token>` with
	// every request (and the stream protocol's upgrade); empty sends none.
	Token string
}

func (o Options) withDefaults() Options {
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = 256
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 8
	}
	if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 25 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: newTransport(o)}
	}
	return o
}

// newTransport is a Transport for many concurrent requests to a few nodes.
func newTransport(o Options) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          o.MaxIdleConnsPerHost * 8,
		MaxIdleConnsPerHost:   o.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // the server bounds its own work; ctx bounds ours
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       o.TLS,
	}
}

// Client talks to a keel cluster through the HTTP API of any of its nodes. Safe for
// concurrent use.
type Client struct {
	addrs []string // base URLs: scheme://host:port
	opts  Options
	cur   atomic.Uint32 // index of the node to try first

	streamsMu sync.Mutex
	streams   map[string]*streamNode // by base URL, when Options.Stream
}

// New returns a client for the nodes at addrs ("host:port" or "http(s)://host:port").
// It does not connect until the first request.
func New(addrs []string, opts Options) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: no addresses")
	}
	c := &Client{opts: opts.withDefaults(), streams: map[string]*streamNode{}}
	for _, a := range addrs {
		if !strings.Contains(a, "://") {
			if opts.TLS != nil {
				a = "https://" + a
			} else {
				a = "http://" + a
			}
		}
		u, err := url.Parse(a)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("client: bad address %q", a)
		}
		c.addrs = append(c.addrs, u.Scheme+"://"+u.Host)
	}
	return c, nil
}

// call is one API request, re-sendable as many times as retries need.
type call struct {
	method string
	path   string // escaped path
	query  url.Values
	body   []byte
	ctype  string
	accept string // Accept header; api.ContentTypeBinaryList for binary list pages
	write  bool   // changes state: retried only when known not applied
}

// do sends c, retrying what is safe to retry, and decodes a 2xx JSON answer into out.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	return c.retry(ctx, cl.write, func(base string) (time.Duration, error) {
		return c.attempt(ctx, base, cl, out)
	})
}

// retry runs one against the node to try first; after a failure that is safe to retry
// (write: the request changes state) it moves on to the next node and backs off
// (at least the server's Retry-After, as one reports it), up to MaxRetries times.
// A 503 NoLeader moves on at once, without backing off, while some node has not
// answered NoLeader in a row: the node is cut off from the leader, the next may not be.
// NoLeaderBudget ends it early (noLeaderBudget).
func (c *Client) retry(ctx context.Context, write bool, one func(base string) (retryAfter time.Duration, err error)) error {
	noLeader := 0 // NoLeader answers in a row since the last backoff
	var nb noLeaderBudget
	for attempt := 0; ; attempt++ {
		idx := int(c.cur.Load()) % len(c.addrs)
		retryAfter, err := one(c.addrs[idx])
		if err == nil {
			return nil
		}
		if attempt >= c.opts.MaxRetries || !safeToRetry(err, write) {
			if nodeTrouble(err) {
				// Not repeated here, but the next call starts elsewhere: a node that
				// timed out or is cut off must not keep every later call (a keepalive
				// loop, say) waiting on it.
				c.cur.CompareAndSwap(uint32(idx), uint32((idx+1)%len(c.addrs)))
			}
			return nb.final(err)
		}
		c.cur.CompareAndSwap(uint32(idx), uint32((idx+1)%len(c.addrs)))
		left, spent := nb.observe(err, c.opts.NoLeaderBudget)
		if spent {
			return nb.final(err)
		}
		if isNoLeader(err) {
			if noLeader++; noLeader < len(c.addrs) {
				continue
			}
		}
		noLeader = 0
		if serr := sleep(ctx, min(c.backoff(attempt, retryAfter), left)); serr != nil {
			return fmt.Errorf("client: gave up: %w; last attempt: %w", serr, err)
		}
	}
}

// noLeaderBudget is one request's Options.NoLeaderBudget: the first 503 NoLeader
// answer starts it, and the request ends with that answer when it is spent.
type noLeaderBudget struct {
	err error     // the last NoLeader answer; nil before the first
	end time.Time // when the budget is spent; zero: no budget
}

// observe records err and reports the time left before the budget is spent (the
// longest wait before the next attempt), and whether it is spent already.
func (b *noLeaderBudget) observe(err error, budget time.Duration) (left time.Duration, spent bool) {
	if isNoLeader(err) {
		if b.err == nil && budget > 0 {
			b.end = time.Now().Add(budget)
		}
		b.err = err
	}
	if b.end.IsZero() {
		return time.Duration(math.MaxInt64), false
	}
	left = time.Until(b.end)
	return left, left <= 0
}

// final is the error a request ends with: when the budget ran and err is node
// trouble too, a node's NoLeader answer (what the cluster said, rather than a dead
// node's refused connection); else err.
func (b *noLeaderBudget) final(err error) error {
	if b.err != nil && !b.end.IsZero() && nodeTrouble(err) {
		return b.err
	}
	return err
}

// attempt sends cl once to the node at base.
func (c *Client) attempt(ctx context.Context, base string, cl call, out any) (time.Duration, error) {
	u := base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return 0, fmt.Errorf("client: %w", err)
	}
	c.authorize(req)
	if cl.ctype != "" {
		req.Header.Set("Content-Type", cl.ctype)
	}
	if cl.accept != "" {
		req.Header.Set("Accept", cl.accept)
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("client: %s %s: %w", cl.method, cl.path, err)
	}
	defer func() {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out == nil {
			return 0, nil
		}
		if lr, ok := out.(*api.ListResponse); ok && resp.Header.Get("Content-Type") == api.ContentTypeBinaryList {
			return 0, decodeBinaryList(resp, lr, cl)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return 0, fmt.Errorf("client: %s %s: decode answer: %w: %w", cl.method, cl.path, errBrokenResponse, err)
		}
		return 0, nil
	}
	return retryAfterOf(resp), readError(resp)
}

// maxBinaryList bounds a binary list page read into memory (the server caps pages far
// below it).
const maxBinaryList = 1 << 30

func decodeBinaryList(resp *http.Response, out *api.ListResponse, cl call) error {
	b, err := readAllSized(resp, maxBinaryList)
	if err != nil {
		return fmt.Errorf("client: %s %s: read answer: %w", cl.method, cl.path, err)
	}
	lr, err := api.DecodeBinaryList(b)
	if err != nil {
		return fmt.Errorf("client: %s %s: decode answer: %w: %w", cl.method, cl.path, errBrokenResponse, err)
	}
	*out = *lr
	return nil
}

// readAllSized reads resp's body (at most max bytes) into one buffer sized by
// Content-Length when the server sent it, so a large page is not copied as it grows.
func readAllSized(resp *http.Response, max int64) ([]byte, error) {
	if n := resp.ContentLength; n > 0 && n <= max {
		b := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, max))
}

// readError turns a failed response into an *Error, even when a proxy answered with
// something that is not keel's JSON.
func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &Error{}
	if err := json.Unmarshal(b, e); err != nil || e.Code == 0 {
		e = &Error{Code: resp.StatusCode, Reason: http.StatusText(resp.StatusCode), Message: strings.TrimSpace(string(b))}
	}
	return e
}

func retryAfterOf(resp *http.Response) time.Duration {
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || secs < 0 {
		return 0
	}
	return time.Duration(secs) * time.Second
}

// authorize adds the token, if any, to req.
func (c *Client) authorize(req *http.Request) {
	if c.opts.Token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+c.opts.Token)
	}
}
