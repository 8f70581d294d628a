package amqpsource_test

import (
	"context"
	"log"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/history"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// Consume a queue and invoke a function through the gateway until SIGTERM (ctx), recording
// invocations in memory. In a cluster the target is the KEDA interceptor with the function's
// routing host instead.
func ExampleRun() {
	inv, err := dispatcher.NewHTTPInvoker("http://127.0.0.1:8080/fn/team-a/resize", "", 8)
	if err != nil {
		log.Fatal(err)
	}
	stats, err := amqpsource.Run(context.Background(), amqpsource.Config{
		URL:   "amqp://guest:guest@127.0.0.1:5672/",
		Queue: "images",
		Config: dispatcher.Config{
			Function:    dispatcher.FunctionRef{Namespace: "team-a", Name: "resize"},
			Trigger:     "on-upload",
			Concurrency: 8,
			Retry:       dispatcher.RetryPolicy{MaxAttempts: 5, Backoff: time.Second},
			Invoker:     inv,
			Recorder:    history.NewMemory(0),
		},
	})
	log.Printf("%+v %v", stats, err)
}
