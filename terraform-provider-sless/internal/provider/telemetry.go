package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the provider's tracer. Spans cover each resource operation; the API
// calls under them are client spans (otelhttp) whose traceparent the gateway continues.
// They are exported only when the plugin process sets up an SDK (see main.go).
const TracerName = "sless.dev/sless/terraform-provider-sless"

// startSpan starts the span of one operation, e.g. "sless_function.create"; the returned
// func ends it, marking it failed when the operation reported an error.
func startSpan(ctx context.Context, name string) (context.Context, func(*diag.Diagnostics)) {
	ctx, span := otel.Tracer(TracerName).Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, func(diags *diag.Diagnostics) {
		if diags.HasError() {
			errs := diags.Errors()
			span.SetStatus(codes.Error, errs[0].Summary())
		}
		span.End()
	}
}
