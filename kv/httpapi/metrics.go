package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// EnableMetrics counts requests and measures their latency by route pattern, method
// and status into reg (keel_http_requests_total, keel_http_request_duration_seconds),
// and registers the stream door's metrics (SetStreamDoor first).
// Call it before Serve.
func (s *Server) EnableMetrics(reg prometheus.Registerer) error {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keel_http_requests_total", Help: "HTTP requests by route, method and status code.",
	}, []string{"route", "method", "code"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "keel_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
		Buckets: latencyBuckets,
	}, []string{"route", "method"})
	collectors := []prometheus.Collector{requests, latency}
	if d := s.streamDoor.Load(); d != nil {
		collectors = append(collectors, (*d).Collectors()...)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	next := s.handler
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		// The mux records the matched pattern on the request; unmatched paths share
		// one label so that scanning clients cannot blow up the series count.
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.status)).Inc()
		latency.WithLabelValues(route, r.Method).Observe(time.Since(start).Seconds())
	})
	return nil
}
