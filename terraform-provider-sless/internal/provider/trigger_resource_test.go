package provider

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

func triggerConfig(dir, queue string, enabled bool) string {
	return functionBlock("fn", "acc-trig-fn", dir, `GREETING = "from trigger"`) + fmt.Sprintf(`
resource "sless_trigger" "http" {
  name     = "acc-http"
  type     = "http"
  function = sless_function.fn.name
  enabled  = %[1]t
}

resource "sless_trigger" "cron" {
  name     = "acc-cron"
  type     = "cron"
  function = sless_function.fn.name
  schedule = "0 3 * * *"
  timezone = "Europe/Berlin"
  prewarm_seconds = 30
  enabled  = %[1]t
}

resource "sless_trigger" "events" {
  name              = "acc-events"
  type              = "event"
  function          = sless_function.fn.name
  queue             = %[2]q
  broker_secret     = "rabbitmq"
  max_attempts      = 2
  backoff_ms        = 10
  dead_letter_queue = "%[2]s-dead"
  enabled           = %[1]t
}
`, enabled, queue)
}

// checkInvokeStatus calls the function's url and expects the HTTP status.
func checkInvokeStatus(address string, want int) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		url := s.RootModule().Resources[address].Primary.Attributes["url"]
		status, body, err := invoke(url)
		if err != nil {
			return err
		}
		if status != want {
			return fmt.Errorf("invoking %s: %d %q, want %d", url, status, body, want)
		}
		return nil
	}
}

func TestAccTrigger(t *testing.T) {
	d := sless(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "handler.go"), goHandler("v1"))
	// A fixed name: repeated runs reuse one queue on the shared broker instead of leaving
	// a new one behind each time. sless dev keeps a tenant to queues named after it.
	queue := d.client(t).namespace + ".sless-tf-acc-events"
	inPlace := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
		plancheck.ExpectResourceAction("sless_trigger.events", plancheck.ResourceActionUpdate),
		plancheck.ExpectResourceAction("sless_trigger.http", plancheck.ResourceActionUpdate),
		plancheck.ExpectResourceAction("sless_trigger.cron", plancheck.ResourceActionUpdate),
		plancheck.ExpectResourceAction("sless_function.fn", plancheck.ResourceActionNoop),
	}}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{
			{
				Config: triggerConfig(src, queue, true),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("sless_trigger.http", tfjsonpath.New("enabled"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("sless_trigger.cron", tfjsonpath.New("schedule"), knownvalue.StringExact("0 3 * * *")),
					statecheck.ExpectKnownValue("sless_trigger.cron", tfjsonpath.New("prewarm_seconds"), knownvalue.Int64Exact(30)),
					statecheck.ExpectKnownValue("sless_trigger.http", tfjsonpath.New("prewarm_seconds"), knownvalue.Null()),
					statecheck.ExpectKnownValue("sless_trigger.cron", tfjsonpath.New("url"), knownvalue.Null()),
					statecheck.ExpectKnownValue("sless_trigger.cron", tfjsonpath.New("source"), knownvalue.StringExact("0 3 * * * (Europe/Berlin) · warm 30 s before each tick")),
					statecheck.ExpectKnownValue("sless_trigger.cron", tfjsonpath.New("active"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("sless_trigger.events", tfjsonpath.New("active"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("sless_trigger.events", tfjsonpath.New("broker_secret_key"), knownvalue.StringExact("host")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttrPair("sless_trigger.http", "url", "sless_function.fn", "url"),
					checkInvoke("sless_function.fn", "v1 from trigger"),
				),
			},
			{
				// Disabling freezes the function in place: no re-create, calls are refused.
				Config:           triggerConfig(src, queue, false),
				ConfigPlanChecks: inPlace,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("sless_trigger.http", tfjsonpath.New("enabled"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("sless_trigger.http", tfjsonpath.New("active"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("sless_trigger.cron", tfjsonpath.New("active"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("sless_trigger.events", tfjsonpath.New("active"), knownvalue.Bool(false)),
				},
				Check: checkInvokeStatus("sless_trigger.http", http.StatusServiceUnavailable),
			},
			{
				Config:           triggerConfig(src, queue, true),
				ConfigPlanChecks: inPlace,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("sless_trigger.events", tfjsonpath.New("active"), knownvalue.Bool(true)),
				},
				Check: checkInvoke("sless_function.fn", "v1 from trigger"),
			},
			{
				Config:            triggerConfig(src, queue, true),
				ResourceName:      "sless_trigger.events",
				ImportState:       true,
				ImportStateId:     "acc-events",
				ImportStateVerify: true,
			},
			{
				Config:            triggerConfig(src, queue, true),
				ResourceName:      "sless_trigger.cron",
				ImportState:       true,
				ImportStateId:     "acc-cron",
				ImportStateVerify: true,
			},
			{
				Config:            triggerConfig(src, queue, true),
				ResourceName:      "sless_trigger.http",
				ImportState:       true,
				ImportStateVerify: true,
				// The "namespace/name" form of the id works as well.
				ImportStateIdFunc: func(s *terraform.State) (string, error) {
					return s.RootModule().Resources["sless_trigger.http"].Primary.ID, nil
				},
			},
			{
				// Deleted behind Terraform's back: the refresh drops it from the state and the
				// apply creates it again.
				PreConfig: func() {
					c := d.client(t)
					if err := c.DeleteTrigger(context.Background(), c.namespace, "acc-cron"); err != nil {
						t.Fatal(err)
					}
				},
				Config: triggerConfig(src, queue, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_trigger.cron", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("sless_trigger.http", plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("sless_trigger.cron", tfjsonpath.New("active"), knownvalue.Bool(true)),
				},
			},
		},
	})
}
