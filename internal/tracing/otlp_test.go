package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// collector is an OTLP/HTTP endpoint that keeps what it is sent.
type collector struct {
	mu     sync.Mutex
	bodies []map[string]any
	paths  []string
	types  []string
	status int
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bodies, c.paths, c.types = append(c.bodies, m), append(c.paths, r.URL.Path), append(c.types, r.Header.Get("Content-Type"))
	if c.status != 0 {
		http.Error(w, "refused", c.status)
		return
	}
	w.Write([]byte("{}"))
}

// TestExporterOTLPJSON: spans reach the collector at /v1/traces as OTLP JSON: hex ids
// with the parent's, nanosecond times and int attributes as strings, the error status,
// the resource and the scope. A collector's refusal is an export error.
func TestExporterOTLPJSON(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	shutdown, err := Setup(srv.URL, "n1", "v-test")
	if err != nil {
		t.Fatal(err)
	}
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	tr := otel.Tracer("github.com/keel-kv/keel/migrate")
	ctx, root := tr.Start(context.Background(), "migrate.step")
	_, child := tr.Start(ctx, "migrate.chunk")
	child.SetAttributes(attribute.Int64("keel.migrated", 7), attribute.String("keel.resource", "apps/widgets"),
		attribute.Bool("keel.more", true), attribute.StringSlice("keel.list", []string{"a", "b"}))
	child.RecordError(errors.New("boom"))
	child.SetStatus(codes.Error, "boom")
	child.End()
	root.End()
	if err := shutdown(context.Background()); err != nil { // flushes the batch
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bodies) != 1 || c.paths[0] != "/v1/traces" || c.types[0] != "application/json" {
		t.Fatalf("collector got %d requests at %v (%v), want one at /v1/traces", len(c.bodies), c.paths, c.types)
	}
	var req exportRequest
	b, _ := json.Marshal(c.bodies[0])
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	if len(req.ResourceSpans) != 1 || len(req.ResourceSpans[0].ScopeSpans) != 1 {
		t.Fatalf("request = %s", b)
	}
	rs := req.ResourceSpans[0]
	res := map[string]string{}
	for _, a := range rs.Resource.Attributes {
		if a.Value.String != nil {
			res[a.Key] = *a.Value.String
		}
	}
	if res["service.name"] != "keel" || res["service.instance.id"] != "n1" || res["service.version"] != "v-test" {
		t.Errorf("resource = %v", res)
	}
	ss := rs.ScopeSpans[0]
	if ss.Scope.Name != "github.com/keel-kv/keel/migrate" || len(ss.Spans) != 2 {
		t.Fatalf("scope spans = %s", b)
	}
	byName := map[string]span{}
	for _, s := range ss.Spans {
		byName[s.Name] = s
	}
	ch, rt := byName["migrate.chunk"], byName["migrate.step"]
	if len(ch.TraceID) != 32 || len(ch.SpanID) != 16 || ch.TraceID != rt.TraceID || ch.ParentSpanID != rt.SpanID || rt.ParentSpanID != "" {
		t.Errorf("ids: chunk %+v, step %+v", ch, rt)
	}
	if ch.Status.Code != 2 || ch.Status.Message != "boom" || len(ch.Events) != 1 || ch.Events[0].Name != "exception" {
		t.Errorf("chunk status %+v events %+v", ch.Status, ch.Events)
	}
	start, _ := strconv.ParseInt(ch.Start, 10, 64)
	end, _ := strconv.ParseInt(ch.End, 10, 64)
	if start <= 0 || end < start {
		t.Errorf("times %s..%s", ch.Start, ch.End)
	}
	attrs := map[string]anyValue{}
	for _, a := range ch.Attributes {
		attrs[a.Key] = a.Value
	}
	if v := attrs["keel.migrated"]; v.Int == nil || *v.Int != "7" {
		t.Errorf("keel.migrated = %+v, want intValue \"7\"", v)
	}
	if v := attrs["keel.more"]; v.Bool == nil || !*v.Bool {
		t.Errorf("keel.more = %+v", v)
	}
	if v := attrs["keel.list"]; v.Array == nil || len(v.Array.Values) != 2 || *v.Array.Values[1].String != "b" {
		t.Errorf("keel.list = %+v", v)
	}

	c.status = http.StatusServiceUnavailable
	exp, err := NewExporter(srv.URL+"/custom/traces", nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, s := tp.Tracer("x").Start(context.Background(), "x")
	s.End()
	c.mu.Unlock()
	err = exp.ExportSpans(context.Background(), rec.spans)
	c.mu.Lock()
	if err == nil || c.paths[len(c.paths)-1] != "/custom/traces" {
		t.Errorf("export to a refusing collector = %v (path %s), want an error", err, c.paths[len(c.paths)-1])
	}
	for _, bad := range []string{"", "localhost:4318", "ftp://x", "http://"} {
		if _, err := NewExporter(bad, nil); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
}

// recorder keeps ended spans.
type recorder struct{ spans []sdktrace.ReadOnlySpan }

func (r *recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan)                   { r.spans = append(r.spans, s) }
func (r *recorder) Shutdown(context.Context) error                  { return nil }
func (r *recorder) ForceFlush(context.Context) error                { return nil }
