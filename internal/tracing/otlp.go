// Package tracing sends the node's spans (the migrator's, migrate/trace.go) to an
// OpenTelemetry collector over OTLP/HTTP with the JSON encoding, the one OTLP
// encoding that needs no protobuf code: an exporter of a few dozen lines instead of
// the OTLP exporter modules and their gRPC dependencies.
package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Exporter posts spans to an OTLP/HTTP endpoint's /v1/traces as JSON
// (ExportTraceServiceRequest). It implements sdktrace.SpanExporter.
type Exporter struct {
	url    string
	client *http.Client
}

// NewExporter returns an exporter to endpoint, a collector's base URL
// ("http://127.0.0.1:4318"; the path /v1/traces is added unless it has a path).
func NewExporter(endpoint string, client *http.Client) (*Exporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tracing: OTLP endpoint %q: want http(s)://host:port", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	return &Exporter{url: u.String(), client: client}, nil
}

// ExportSpans sends spans in one request; a non-2xx answer is an error.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := json.Marshal(request(spans))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("tracing: export: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("tracing: export: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// Shutdown has nothing to release.
func (e *Exporter) Shutdown(context.Context) error { return nil }

// Setup installs a global tracer provider that batches every span to endpoint, with
// the resource service.name=keel and service.instance.id=nodeID. The returned
// function flushes and stops it.
func Setup(endpoint, nodeID, release string) (shutdown func(context.Context) error, err error) {
	exp, err := NewExporter(endpoint, nil)
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", "keel"),
		attribute.String("service.instance.id", nodeID), attribute.String("service.version", release))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// The JSON shapes of OTLP's ExportTraceServiceRequest (opentelemetry-proto's JSON
// mapping: ids in hex, 64-bit integers as decimal strings, enums as numbers).
type (
	exportRequest struct {
		ResourceSpans []resourceSpans `json:"resourceSpans"`
	}
	resourceSpans struct {
		Resource   otlpResource `json:"resource"`
		ScopeSpans []scopeSpans `json:"scopeSpans"`
	}
	otlpResource struct {
		Attributes []keyValue `json:"attributes,omitempty"`
	}
	scopeSpans struct {
		Scope scope  `json:"scope"`
		Spans []span `json:"spans"`
	}
	scope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	span struct {
		TraceID      string     `json:"traceId"`
		SpanID       string     `json:"spanId"`
		ParentSpanID string     `json:"parentSpanId,omitempty"`
		Name         string     `json:"name"`
		Kind         int        `json:"kind"`
		Start        string     `json:"startTimeUnixNano"`
		End          string     `json:"endTimeUnixNano"`
		Attributes   []keyValue `json:"attributes,omitempty"`
		Events       []event    `json:"events,omitempty"`
		Status       status     `json:"status"`
	}
	event struct {
		Time       string     `json:"timeUnixNano"`
		Name       string     `json:"name"`
		Attributes []keyValue `json:"attributes,omitempty"`
	}
	status struct {
		Code    int    `json:"code,omitempty"`
		Message string `json:"message,omitempty"`
	}
	keyValue struct {
		Key   string   `json:"key"`
		Value anyValue `json:"value"`
	}
	anyValue struct {
		String *string      `json:"stringValue,omitempty"`
		Bool   *bool        `json:"boolValue,omitempty"`
		Int    *string      `json:"intValue,omitempty"`
		Double *float64     `json:"doubleValue,omitempty"`
		Array  *arrayValues `json:"arrayValue,omitempty"`
	}
	arrayValues struct {
		Values []anyValue `json:"values"`
	}
)

// request groups spans by resource and scope, in order of first appearance.
func request(spans []sdktrace.ReadOnlySpan) exportRequest {
	var out exportRequest
	type key struct {
		res   *resource.Resource
		scope string
	}
	rIdx, sIdx := map[*resource.Resource]int{}, map[key]int{}
	for _, s := range spans {
		ri, ok := rIdx[s.Resource()]
		if !ok {
			ri = len(out.ResourceSpans)
			rIdx[s.Resource()] = ri
			var attrs []attribute.KeyValue
			if s.Resource() != nil {
				attrs = s.Resource().Attributes()
			}
			out.ResourceSpans = append(out.ResourceSpans, resourceSpans{Resource: otlpResource{Attributes: keyValues(attrs)}})
		}
		rs := &out.ResourceSpans[ri]
		k := key{s.Resource(), s.InstrumentationScope().Name}
		si, ok := sIdx[k]
		if !ok {
			si = len(rs.ScopeSpans)
			sIdx[k] = si
			rs.ScopeSpans = append(rs.ScopeSpans, scopeSpans{Scope: scope{Name: k.scope, Version: s.InstrumentationScope().Version}})
		}
		rs.ScopeSpans[si].Spans = append(rs.ScopeSpans[si].Spans, toSpan(s))
	}
	return out
}

func toSpan(s sdktrace.ReadOnlySpan) span {
	out := span{TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
		Name: s.Name(), Kind: int(s.SpanKind()), Start: nanos(s.StartTime()), End: nanos(s.EndTime()),
		Attributes: keyValues(s.Attributes())}
	if s.Parent().IsValid() {
		out.ParentSpanID = s.Parent().SpanID().String()
	}
	for _, e := range s.Events() {
		out.Events = append(out.Events, event{Time: nanos(e.Time), Name: e.Name, Attributes: keyValues(e.Attributes)})
	}
	switch s.Status().Code {
	case codes.Ok:
		out.Status.Code = 1
	case codes.Error:
		out.Status.Code, out.Status.Message = 2, s.Status().Description
	}
	return out
}

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func keyValues(attrs []attribute.KeyValue) []keyValue {
	out := make([]keyValue, 0, len(attrs))
	for _, a := range attrs {
		out = append(out, keyValue{Key: string(a.Key), Value: value(a.Value)})
	}
	return out
}

func value(v attribute.Value) anyValue {
	switch v.Type() {
	case attribute.BOOL:
		b := v.AsBool()
		return anyValue{Bool: &b}
	case attribute.INT64:
		s := strconv.FormatInt(v.AsInt64(), 10)
		return anyValue{Int: &s}
	case attribute.FLOAT64:
		f := v.AsFloat64()
		return anyValue{Double: &f}
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE:
		var vals []anyValue
		for _, e := range sliceValues(v) {
			vals = append(vals, value(e))
		}
		return anyValue{Array: &arrayValues{Values: vals}}
	}
	s := v.String()
	return anyValue{String: &s}
}

func sliceValues(v attribute.Value) []attribute.Value {
	var out []attribute.Value
	switch v.Type() {
	case attribute.BOOLSLICE:
		for _, b := range v.AsBoolSlice() {
			out = append(out, attribute.BoolValue(b))
		}
	case attribute.INT64SLICE:
		for _, n := range v.AsInt64Slice() {
			out = append(out, attribute.Int64Value(n))
		}
	case attribute.FLOAT64SLICE:
		for _, f := range v.AsFloat64Slice() {
			out = append(out, attribute.Float64Value(f))
		}
	case attribute.STRINGSLICE:
		for _, s := range v.AsStringSlice() {
			out = append(out, attribute.StringValue(s))
		}
	}
	return out
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)
