package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestAccTracing: each resource operation is a span, and the API calls made under it are its
// client-span children (so the gateway's spans join the same trace).
func TestAccTracing(t *testing.T) {
	d := sless(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{{
			// A trigger may exist before its function; no build is needed for this test.
			Config: `
resource "sless_trigger" "t" {
  name     = "acc-traced"
  type     = "http"
  function = "not-deployed-yet"
}`,
		}},
	})
	spans := rec.Ended()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
	}
	create, ok := byName["sless_trigger.create"]
	if !ok {
		t.Fatalf("no sless_trigger.create span among %d spans: %v", len(spans), names(spans))
	}
	if create.Status().Code == codes.Error {
		t.Errorf("create span failed: %v", create.Status())
	}
	var post sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == create.SpanContext().SpanID() && s.SpanKind() == trace.SpanKindClient && s.Name() == "HTTP POST" {
			post = s
		}
	}
	if post == nil || post.SpanContext().TraceID() != create.SpanContext().TraceID() {
		t.Fatalf("no POST client span under sless_trigger.create: %v", names(spans))
	}
	for _, want := range []string{"sless.configure", "sless_trigger.read", "sless_trigger.delete"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("no %s span: %v", want, names(spans))
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%s(%s)", s.Name(), s.SpanKind()))
	}
	return out
}
