package cron_test

import (
	"context"
	"log"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/triggers/cron"
)

// Fire one cron tick, as `sless dev`'s scheduler or a CronJob pod does.
func ExampleFire() {
	inv, err := dispatcher.NewHTTPInvoker("http://127.0.0.1:8080/fn/team-a/report", "", 1)
	if err != nil {
		log.Fatal(err)
	}
	err = cron.Fire(context.Background(), cron.FireConfig{
		Function: dispatcher.FunctionRef{Namespace: "team-a", Name: "report"},
		Schedule: "0 9 * * 1-5",
		Timezone: "Europe/Berlin",
		Invoker:  inv,
	})
	log.Print(err)
}
