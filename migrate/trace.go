package migrate

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the migrator's spans.
const tracerName = "github.com/keel-kv/keel/migrate"

// Spans (RFD 126: "a root span created by the migration framework and a child span
// per migration performed"): one per Step and KeyStep (the root of a round's work on
// one resource or key migration), one per chunk and per key-migration pass end or
// rollback finish under it, and one per phase transition (Advance, Rollback).
const (
	spanStep         = "migrate.step"
	spanChunk        = "migrate.chunk"
	spanKeyStep      = "migrate.key_step"
	spanKeyChunk     = "migrate.key_chunk"
	spanKeyPassEnd   = "migrate.key_pass_end"
	spanKeyRollback  = "migrate.key_rollback_finish"
	spanKeyAdvance   = "migrate.key_advance"
	spanKeyRollPhase = "migrate.key_rollback"
)

// tracer is the tracer of tp, or of the global provider (a no-op unless the agent
// installed an exporter) when tp is nil.
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// startSpan starts a span named name under ctx's.
func startSpan(ctx context.Context, t trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends span, recording err (nil: success) as its status.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
