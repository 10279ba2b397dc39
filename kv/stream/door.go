package stream

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/raft"
)

// Door serves the stream protocol on the connections the core's HTTP server upgrades
// from GET /v1/stream (the route, its access rule and the token are the HTTP door's).
// Create it with Attach.
type Door struct {
	core    *kv.Server
	cfg     kv.Config // the core's, which never changes
	metrics *metrics
	observe atomic.Bool // the metrics are registered (Collectors)

	// conns are the upgraded connections, which the HTTP server no longer tracks.
	mu     sync.Mutex
	conns  map[*streamConn]struct{}
	closed bool
	wg     sync.WaitGroup // one per registered connection
}

// Attach makes a door serve the stream protocol on the connections the HTTP door h
// upgrades from GET /v1/stream (httpapi.Server.SetStreamDoor), over h's core, and
// returns it. Attach before httpapi.Server.EnableMetrics, which registers the door's
// metrics too.
func Attach(h *httpapi.Server) *Door {
	core := h.Core()
	d := &Door{core: core, cfg: core.Config(), metrics: newMetrics()}
	h.SetStreamDoor(d)
	return d
}

// features is what this server offers beyond the protocol's first release.
var features = strings.Join([]string{api.StreamFeatureSharedEvents, api.StreamFeatureLeases,
	api.StreamFeatureRequireLeader, api.StreamFeatureTxn}, ", ")

// Upgrade takes over the connection of GET /v1/stream: every request of the stream
// runs for c, the token of the upgrade request, with the rights it holds at the time.
func (d *Door) Upgrade(w http.ResponseWriter, r *http.Request, c kv.Caller) error {
	if !api.HeaderHasToken(r.Header, "Connection", "upgrade") || !api.HeaderHasToken(r.Header, "Upgrade", api.StreamProtocol) {
		return fmt.Errorf("%w: %s needs Connection: Upgrade and Upgrade: %s", kv.ErrInvalidParam, api.PathStream, api.StreamProtocol)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
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
		"\r\n" + api.HeaderStreamFeatures + ": " + features + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return nil // the status line is out (hijacked): nothing more to answer
	}
	sc := d.newStreamConn(conn, brw.Reader, c, httpapi.TLSState(r))
	if sc == nil {
		conn.Close()
		return nil
	}
	sc.watches.shared = api.HeaderHasToken(r.Header, api.HeaderStreamFeatures, api.StreamFeatureSharedEvents)
	go sc.serve()
	return nil
}

// Close stops every stream from reading new requests, lets the requests in flight
// finish and be answered until ctx is done, then closes what is left.
func (d *Door) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	conns := make([]*streamConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	for _, c := range conns {
		c.conn.SetReadDeadline(time.Now())
	}
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
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

// Collectors are the door's metrics (keel_stream_requests_total,
// keel_stream_request_duration_seconds), which httpapi.Server.EnableMetrics registers.
func (d *Door) Collectors() []prometheus.Collector {
	d.observe.Store(true)
	return []prometheus.Collector{d.metrics.requests, d.metrics.latency}
}

// metrics count stream requests by op and status and measure their latency.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keel_stream_requests_total", Help: "Stream-protocol requests by op and status code.",
		}, []string{"op", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "keel_stream_request_duration_seconds", Help: "Stream-protocol request latency by op.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
	}
}

func (m *metrics) observe(op api.StreamOp, code int, d time.Duration) {
	m.requests.WithLabelValues(op.String(), strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(op.String()).Observe(d.Seconds())
}
