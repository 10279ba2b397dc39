package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// StreamDoor serves the stream protocol on the connections upgraded from GET
// /v1/stream (kv/stream's Door). The route, its access rule and the token are the
// HTTP server's; the door takes over the connection.
type StreamDoor interface {
	// Upgrade takes over r's connection; every request on it runs for c.
	Upgrade(w http.ResponseWriter, r *http.Request, c kv.Caller) error
	// Close stops the upgraded connections (Shutdown), at the latest when ctx is done.
	Close(ctx context.Context) error
	// Collectors are the door's metrics, which EnableMetrics registers.
	Collectors() []prometheus.Collector
}

// SetStreamDoor makes d serve GET /v1/stream (before Serve and EnableMetrics);
// without one the route answers 404.
func (s *Server) SetStreamDoor(d StreamDoor) { s.streamDoor.Store(&d) }

// handleStream hands GET /v1/stream to the stream door.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) error {
	d := s.streamDoor.Load()
	if d == nil {
		return fmt.Errorf("%w: this server serves no stream protocol on %s", kv.ErrNoRoute, api.PathStream)
	}
	return (*d).Upgrade(w, r, CallerOf(r))
}

// closeStreams closes the stream door's connections (Shutdown).
func (s *Server) closeStreams(ctx context.Context) error {
	if d := s.streamDoor.Load(); d != nil {
		return (*d).Close(ctx)
	}
	return nil
}
