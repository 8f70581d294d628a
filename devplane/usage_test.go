package devplane_test

import (
	"testing"

	"sless.dev/sless/gateway/backend/backendtest"
	"sless.dev/sless/gateway/client"
)

// TestUsageAPI runs the usage table both planes run (backendtest.RunUsage) over sless dev's
// in-memory history.
func TestUsageAPI(t *testing.T) {
	d := startDev(t, devOptions{})
	anonymous, err := client.New(d.endpoint, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	backendtest.RunUsage(t, backendtest.UsagePlane{Tenant: d.client, Other: d.as("other").client, Anonymous: anonymous, Namespace: d.ns,
		Recorder: d.rec, Settle: func(int) {}})
}
