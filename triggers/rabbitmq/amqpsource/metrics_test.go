package amqpsource_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestMetricsCountEveryOutcome: the OpenTelemetry counters (exported by `sless dispatcher`
// through gateway.SetupTelemetry) say what Stats says, per queue, and nothing stays in flight.
func TestMetricsCountEveryOutcome(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	useGlobal[metric.MeterProvider](t, otel.GetMeterProvider, otel.SetMeterProvider, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))

	q := newQueue(t)
	publish(t, q, 4, nil)
	// Message 3 always fails: two retries, then the dead-letter queue.
	f := newFnServer(t, func(id string, _ int) (int, time.Duration) {
		if id == "3" {
			return http.StatusInternalServerError, 0
		}
		return http.StatusOK, 0
	})
	st := run(t, config(t, q, f))
	if st.Acked != 3 || st.Retried != 2 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v, want 3 acked, 2 retried, 1 dead-lettered", st)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s: %T, want an int64 sum", m.Name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				if v, _ := dp.Attributes.Value(attribute.Key("messaging.destination.name")); v.AsString() == q {
					got[m.Name] += dp.Value
				}
			}
		}
	}
	for name, want := range map[string]int64{
		"sless.dispatcher.messages.consumed":      st.Consumed,
		"sless.dispatcher.messages.acked":         st.Acked,
		"sless.dispatcher.messages.retried":       st.Retried,
		"sless.dispatcher.messages.dead_lettered": st.DeadLettered,
		"sless.dispatcher.messages.in_flight":     0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %d (recorded: %v), want %d", name, v, ok, want)
		}
	}
	if st.Consumed != 6 {
		t.Errorf("consumed %d, want 6 (4 messages, 2 retries)", st.Consumed)
	}
}
