package kv

import (
	"fmt"
	"sync"
)

// Request bytes in flight: a request's body costs the node its size from the moment
// the size is known until the request is done — an HTTP body from its Content-Length
// (the largest request when it has none), a stream-protocol frame from its length
// prefix, an etcd gRPC message from its 5-byte prefix — before its bytes are read.
// The node holds at most MaxRequestBytesInFlight of them, one source IP address at
// most MaxRequestBytesInFlightPerClient, over every door together; one more is
// refused with ErrTooManyRequests (429, etcd's ResourceExhausted).
//
// Why: a door allocates a body as its bytes arrive, and a client that announces a
// large body and sends part of it holds what it sent. Counted by requests alone, one
// client could hold MaxInFlightPerClient (2,500) requests of MaxRequestBytes (8 MiB)
// each, ~20 GB (issue #33). With the defaults one client holds at most 64 MiB of
// bodies (8 of the largest requests, hundreds of kube-apiserver's), the node 256 MiB.

// requestBytes counts the bytes in flight of the node and of each source address.
type requestBytes struct {
	mu      sync.Mutex
	node    int64
	clients map[string]int64
}

// AdmitBytes takes n bytes of request body in flight for the client at addr (its
// "host:port" or host; "" when unknown, counted for the node only). It returns the
// function that gives them back (once), or ErrTooManyRequests when the node or the
// client would hold more than its bound. n is capped at the smaller bound, so one
// request alone is always admitted; a door refuses an oversized body by its own rule
// (ErrTooLarge). Safe for concurrent use.
func (s *Server) AdmitBytes(addr string, n int64) (release func(), err error) {
	maxNode, maxClient := s.cfg.MaxRequestBytesInFlight, s.cfg.MaxRequestBytesInFlightPerClient
	src := hostOf(addr)
	if maxClient <= 0 || src == "" {
		maxClient = 0
	}
	if maxNode <= 0 && maxClient == 0 || n <= 0 {
		return func() {}, nil
	}
	for _, m := range []int64{maxNode, maxClient} {
		if m > 0 {
			n = min(n, m)
		}
	}
	rb := &s.requestBytes
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if (maxNode > 0 && rb.node+n > maxNode) || (maxClient > 0 && rb.clients[src]+n > maxClient) {
		return nil, fmt.Errorf("%w: this node holds its maximum of %d bytes of requests in flight, or %d from one address: "+
			"retry later or on another node", ErrTooManyRequests, maxNode, maxClient)
	}
	rb.node += n
	if maxClient > 0 {
		if rb.clients == nil {
			rb.clients = map[string]int64{}
		}
		rb.clients[src] += n
	}
	h := &heldBytes{rb: rb, src: src, n: n, perClient: maxClient > 0}
	return h.release, nil
}

// heldBytes are the bytes one admitted request holds (cheaper per request than
// sync.OnceFunc).
type heldBytes struct {
	rb        *requestBytes
	src       string
	n         int64
	perClient bool
	given     bool // guarded by rb.mu: released, so a second release is a no-op
}

func (h *heldBytes) release() {
	rb := h.rb
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if h.given {
		return
	}
	h.given = true
	rb.node -= h.n
	if h.perClient {
		if rb.clients[h.src] -= h.n; rb.clients[h.src] <= 0 {
			delete(rb.clients, h.src)
		}
	}
}

// RequestBytesInFlight is the bytes of request bodies the node holds now, and those
// of the client at addr.
func (s *Server) RequestBytesInFlight(addr string) (node, client int64) {
	rb := &s.requestBytes
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.node, rb.clients[hostOf(addr)]
}

// AdmitBody is AdmitBytes for an HTTP request's body as its Content-Length announces
// it (-1: unknown, as a chunked body's is, which costs the largest request,
// MaxRequestBytes); a request without a body (0) costs nothing. Every HTTP door (the
// HTTP port, HTTP/1.1 and h2c, and the etcd door's JSON gateway) takes it before it
// reads the body, and gives it back when the request is done.
func (s *Server) AdmitBody(addr string, contentLength int64) (release func(), err error) {
	if contentLength < 0 {
		contentLength = s.cfg.MaxRequestBytes()
	}
	return s.AdmitBytes(addr, contentLength)
}
