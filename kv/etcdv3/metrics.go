package etcdv3

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// grpcMetrics counts and times the door's calls under the names go-grpc-prometheus
// gives them (grpc_server_started_total, grpc_server_handled_total, labelled grpc_type,
// grpc_service, grpc_method and grpc_code; grpc_server_handling_seconds, without the
// code): the names etcd exports, which its mixin's gRPC alerts and dashboards read
// (etcdGRPCRequestsSlow reads the histogram, which etcd exports with
// --metrics=extensive; keel always does). Its interceptors run first, so a call the
// door refuses (no token, no leader, over budget) is counted with the code it got.
// Calls through the JSON gateway are counted too: they are gRPC calls in process.
type grpcMetrics struct {
	started  *prometheus.CounterVec
	handled  *prometheus.CounterVec
	handling *prometheus.HistogramVec
}

func newGRPCMetrics() *grpcMetrics {
	return &grpcMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_started_total",
			Help: "RPCs started on the etcd door, by type, service and method.",
		}, []string{"grpc_type", "grpc_service", "grpc_method"}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grpc_server_handled_total",
			Help: "RPCs completed on the etcd door, by type, service, method and gRPC status code.",
		}, []string{"grpc_type", "grpc_service", "grpc_method", "grpc_code"}),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Time the etcd door took to handle an RPC (a stream: its whole life), by type, service and method.",
			Buckets: prometheus.DefBuckets, // go-grpc-prometheus' default, which etcd uses
		}, []string{"grpc_type", "grpc_service", "grpc_method"}),
	}
}

// Collectors are the door's metrics, for the embedding agent to register; each
// method's started, OK-handled and handling-time series exist from the start at 0, so
// a rate over them is defined before the first call.
func (e *Server) Collectors() []prometheus.Collector {
	for name, info := range e.grpc.GetServiceInfo() {
		for _, m := range info.Methods {
			typ := grpcType(m.IsClientStream, m.IsServerStream)
			e.metrics.started.WithLabelValues(typ, name, m.Name)
			e.metrics.handled.WithLabelValues(typ, name, m.Name, "OK")
			e.metrics.handling.WithLabelValues(typ, name, m.Name)
		}
	}
	return []prometheus.Collector{e.metrics.started, e.metrics.handled, e.metrics.handling}
}

func grpcType(clientStream, serverStream bool) string {
	switch {
	case clientStream && serverStream:
		return "bidi_stream"
	case clientStream:
		return "client_stream"
	case serverStream:
		return "server_stream"
	}
	return "unary"
}

// splitMethod splits "/etcdserverpb.KV/Range" into its service and method.
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

// unary counts a unary call around next, the door's next interceptor (called, not
// chained: a gRPC chain costs a closure a call).
func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo,
	handler grpc.UnaryHandler, next grpc.UnaryServerInterceptor) (any, error) {
	svc, method := splitMethod(info.FullMethod)
	m.started.WithLabelValues("unary", svc, method).Inc()
	start := time.Now()
	resp, err := next(ctx, req, info, handler)
	m.handled.WithLabelValues("unary", svc, method, status.Code(err).String()).Inc()
	m.handling.WithLabelValues("unary", svc, method).Observe(time.Since(start).Seconds())
	return resp, err
}

func (m *grpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo,
	handler grpc.StreamHandler) error {
	typ := grpcType(info.IsClientStream, info.IsServerStream)
	svc, method := splitMethod(info.FullMethod)
	m.started.WithLabelValues(typ, svc, method).Inc()
	start := time.Now()
	err := handler(srv, ss)
	m.handled.WithLabelValues(typ, svc, method, status.Code(err).String()).Inc()
	m.handling.WithLabelValues(typ, svc, method).Observe(time.Since(start).Seconds())
	return err
}
