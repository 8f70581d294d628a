package dispatcher_test

import (
	"context"
	"log"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/history"
)

// Consume a queue and invoke a function through the gateway until SIGTERM (ctx), recording
// invocations in memory. In a cluster the target is the KEDA interceptor with the function's
// routing host instead.
func ExampleRun() {
	inv, err := dispatcher.NewHTTPInvoker("http://127.0.0.1:8080/fn/team-a/resize", "", 8)
	if err != nil {
		log.Fatal(err)
	}
	stats, err := dispatcher.Run(context.Background(), dispatcher.Config{
		URL:         "amqp://guest:guest@127.0.0.1:5672/",
		Queue:       "images",
		Function:    dispatcher.FunctionRef{Namespace: "team-a", Name: "resize"},
		Trigger:     "on-upload",
		Concurrency: 8,
		Retry:       dispatcher.RetryPolicy{MaxAttempts: 5, Backoff: time.Second},
		Invoker:     inv,
		Recorder:    history.NewMemory(0),
	})
	log.Printf("%+v %v", stats, err)
}

// Fire one cron tick, as `sless dev`'s scheduler or a CronJob pod does.
func ExampleFire() {
	inv, err := dispatcher.NewHTTPInvoker("http://127.0.0.1:8080/fn/team-a/report", "", 1)
	if err != nil {
		log.Fatal(err)
	}
	err = dispatcher.Fire(context.Background(), dispatcher.FireConfig{
		Function: dispatcher.FunctionRef{Namespace: "team-a", Name: "report"},
		Schedule: "0 9 * * 1-5",
		Timezone: "Europe/Berlin",
		Invoker:  inv,
	})
	log.Print(err)
}
