package etcdv3

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// TestGRPCMetricsCountByCode: every call is counted started and handled under its
// method and its code, the OK ones through the cached series and a refused one with
// its own code, and timed under its method (grpc_server_handling_seconds, which the
// etcd mixin's etcdGRPCRequestsSlow reads), unary and streaming alike (kills: a failed
// call counted OK or not timed, the cache keyed by method but not by type, a series
// counted twice).
func TestGRPCMetricsCountByCode(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := New(core)
	e.Collectors()
	conn := serveDoor(t, e)
	ctx := context.Background()
	cl := pb.NewKVClient(conn)
	for range 3 {
		if _, err := cl.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Put(ctx, &pb.PutRequest{}); err == nil { // no key: InvalidArgument
		t.Fatal("a Put without a key was served")
	}
	w, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err == nil {
		t.Fatal("the watch stream answered after its close")
	}
	m := e.metrics
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"Put started", value(t, m.started.WithLabelValues("unary", "etcdserverpb.KV", "Put")), 4},
		{"Put OK", value(t, m.handled.WithLabelValues("unary", "etcdserverpb.KV", "Put", "OK")), 3},
		{"Put InvalidArgument", value(t, m.handled.WithLabelValues("unary", "etcdserverpb.KV", "Put", "InvalidArgument")), 1},
		{"Range started", value(t, m.started.WithLabelValues("unary", "etcdserverpb.KV", "Range")), 0},
		{"Watch started", value(t, m.started.WithLabelValues("bidi_stream", "etcdserverpb.Watch", "Watch")), 1},
		{"Put timed", samples(t, m.handling.WithLabelValues("unary", "etcdserverpb.KV", "Put")), 4},
		{"Range timed", samples(t, m.handling.WithLabelValues("unary", "etcdserverpb.KV", "Range")), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	// The stream's end is counted once its handler returns, after the client saw it.
	for range 100 {
		if value(t, m.handled.WithLabelValues("bidi_stream", "etcdserverpb.Watch", "Watch", "OK")) == 1 {
			if n := samples(t, m.handling.WithLabelValues("bidi_stream", "etcdserverpb.Watch", "Watch")); n != 1 {
				t.Errorf("the Watch stream was timed %v times, want 1", n)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("the Watch stream's end was not counted OK")
}

// samples is how many observations histogram h holds.
func samples(t *testing.T, h prometheus.Observer) float64 {
	t.Helper()
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return float64(m.GetHistogram().GetSampleCount())
}

// value reads counter c.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
