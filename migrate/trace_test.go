package migrate

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// spanTree is the finished spans of one exporter, by name, with a check of parents.
type spanTree struct {
	t     *testing.T
	spans tracetest.SpanStubs
}

func (s spanTree) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, sp := range s.spans {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

// childrenOf checks that every span named child has a parent span named parent in the
// same trace, and returns how many there are.
func (s spanTree) childrenOf(child, parent string) int {
	s.t.Helper()
	byID := map[string]tracetest.SpanStub{}
	for _, sp := range s.spans {
		byID[sp.SpanContext.SpanID().String()] = sp
	}
	kids := s.named(child)
	for _, k := range kids {
		p, ok := byID[k.Parent.SpanID().String()]
		if !ok || p.Name != parent || p.SpanContext.TraceID() != k.SpanContext.TraceID() {
			s.t.Errorf("span %s has parent %q (found %v), want %s", child, p.Name, ok, parent)
		}
	}
	return len(kids)
}

func attr(sp tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, a := range sp.Attributes {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func newRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

// TestMigrationSpans: a storage-version migration emits one migrate.step span per
// Step and one migrate.chunk child per chunk, whose counts add up to the objects
// rewritten; a failed step's span carries the error. Kills: a chunk without its span
// (fewer chunk spans than chunks), chunk spans not under their step (context not
// passed), and counts taken before the chunk ran.
func TestMigrationSpans(t *testing.T) {
	f := newFixture(t)
	for i := range 25 {
		f.put(fmt.Sprintf("t%02d", i), v1obj(fmt.Sprintf("t%02d", i), i), "apps/widgets/v1")
	}
	tp, exp := newRecorder(t)
	m := f.migrator(Config{Chunk: 10, TracerProvider: tp})
	f.stepUntil(m, StateSucceeded)
	tree := spanTree{t: t, spans: exp.GetSpans()}
	chunks := tree.childrenOf(spanChunk, spanStep)
	if chunks < 3 {
		t.Fatalf("%d chunk spans for 25 objects in chunks of 10, want >= 3", chunks)
	}
	var migrated int64
	for _, sp := range tree.named(spanChunk) {
		if v, ok := attr(sp, "keel.resource"); !ok || v.AsString() != "apps/widgets" {
			t.Errorf("chunk span resource = %v", v)
		}
		v, _ := attr(sp, "keel.migrated")
		migrated += v.AsInt64()
	}
	if migrated != 25 {
		t.Errorf("chunk spans count %d migrated objects, want 25", migrated)
	}
	if len(tree.named(spanStep)) < chunks {
		t.Errorf("%d step spans for %d chunks", len(tree.named(spanStep)), chunks)
	}

	exp.Reset()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Step(ctx, f.res); err == nil {
		t.Fatal("a step with a cancelled context succeeded")
	}
	steps := spanTree{t: t, spans: exp.GetSpans()}.named(spanStep)
	if len(steps) != 1 || steps[0].Status.Code != codes.Error {
		t.Errorf("failed step spans = %+v, want one with an error status", steps)
	}
}

// TestKeyMigrationSpans: key-migration phase transitions (Advance, Rollback) emit
// their spans through the global provider, and the leader's work emits a
// migrate.key_step per KeyStep with migrate.key_chunk and migrate.key_pass_end
// children. Kills: a key chunk without its span, and transitions without spans.
func TestKeyMigrationSpans(t *testing.T) {
	tp, exp := newRecorder(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	f := newKeyFixture(t)
	f.seed(120)
	for to := 1; to <= 3; to++ {
		if err := f.advance(to); err != nil {
			t.Fatalf("advance to %d: %v", to, err)
		}
	}
	m := f.migrator() // chunks of 50; spans through the global provider
	if w := f.stepUntilDone(m); w.Written != 120 {
		t.Fatalf("copy wrote %d keys, want 120", w.Written)
	}
	if _, err := Rollback(context.Background(), f.n, f.k, 2, Transition{By: "test"}); err != nil {
		t.Fatal(err)
	}
	tree := spanTree{t: t, spans: exp.GetSpans()}
	if n := len(tree.named(spanKeyAdvance)); n != 3 {
		t.Errorf("%d advance spans, want 3", n)
	}
	rb := tree.named(spanKeyRollPhase)
	if len(rb) != 1 {
		t.Fatalf("%d rollback spans, want 1", len(rb))
	}
	if v, _ := attr(rb[0], "keel.phase"); v.AsInt64() != 2 {
		t.Errorf("rollback span phase = %v, want 2", v)
	}
	if n := tree.childrenOf(spanKeyChunk, spanKeyStep); n < 3 {
		t.Errorf("%d key chunk spans for 120 keys in chunks of 50, want >= 3", n)
	}
	var writes int64
	for _, sp := range tree.named(spanKeyChunk) {
		v, _ := attr(sp, "keel.writes")
		writes += v.AsInt64()
	}
	if writes != 120 {
		t.Errorf("key chunk spans count %d writes, want 120", writes)
	}
	if tree.childrenOf(spanKeyPassEnd, spanKeyStep) == 0 {
		t.Error("no key pass end span")
	}
}
