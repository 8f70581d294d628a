// Command terraform-provider-sless is the sless Terraform provider plugin. Terraform starts
// it; run it with -debug to attach a debugger (TF_REATTACH_PROVIDERS).
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"sless.dev/sless/terraform-provider-sless/internal/provider"
)

// version is set at release time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run with support for debuggers like delve")
	flag.Parse()
	ctx := context.Background()
	shutdown, err := setupTracing(ctx)
	if err != nil {
		log.Fatal(err)
	}
	err = providerserver.Serve(ctx, provider.New(version), providerserver.ServeOpts{
		Address: provider.Address,
		Debug:   *debug,
	})
	shutdown()
	if err != nil {
		log.Fatal(err)
	}
}

// setupTracing exports the provider's spans over OTLP/gRPC when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) variable is set, and propagates W3C
// trace context to the gateway; without it tracing stays a no-op.
func setupTracing(ctx context.Context) (func(), error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func() {}, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(sdkresource.NewSchemaless(attribute.String("service.name", "terraform-provider-sless"))))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx) // best effort: Terraform is waiting for the plugin to exit
	}, nil
}
