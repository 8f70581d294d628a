package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/buildkit/sourcezip"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
)

// devExamples are the functions `sless dev --deploy-examples` deploys: one per language.
var devExamples = []struct{ dir, runtime string }{
	{"hello-go", "go1.25"},
	{"hello-python", "python3.11"},
	{"hello-node", "nodejs20"},
}

// exampleCron is the cron trigger deployed with the examples.
const (
	exampleCron         = "hello-python-every-minute"
	exampleCronFunction = "hello-python"
	exampleReadyTimeout = 5 * time.Minute
)

// deployExamples deploys the examples through the REST API, exactly as a user or the
// Terraform provider would, waits until they are Ready and prints how to call them.
// Re-running it against a data directory that has them already just re-uploads the source.
func deployExamples(ctx context.Context, out io.Writer, endpoint, token, ns, root string) error {
	c, err := client.New(endpoint, token, nil)
	if err != nil {
		return err
	}
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	for _, ex := range devExamples {
		if err := deployExample(ctx, c, ns, filepath.Join(root, ex.dir), ex.dir, ex.runtime); err != nil {
			return err
		}
	}
	_, err = c.CreateTrigger(ctx, ns, api.CreateTrigger{Name: exampleCron, TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerCron), Function: ptr.To(exampleCronFunction), Schedule: ptr.To("* * * * *")}})
	if err != nil && !client.IsConflict(err) {
		return fmt.Errorf("cron trigger %s: %w", exampleCron, err)
	}
	fmt.Fprintln(out, "\nexamples (building may take a minute the first time):")
	for _, ex := range devExamples {
		fn, err := c.WaitReady(ctx, ns, ex.dir, api.FunctionStatus{}, client.WaitOptions{Timeout: exampleReadyTimeout})
		var buildErr *client.BuildError
		switch {
		case errors.As(err, &buildErr):
			fmt.Fprintf(out, "  %-13s FAILED: %s\n%s\n", ex.dir, fn.Status.Message, fn.Status.LastBuildError)
			continue
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return fmt.Errorf("function %s is not Ready after %s (phase %s)", ex.dir, exampleReadyTimeout, fn.Status.Phase)
		case err != nil:
			return err
		}
		fmt.Fprintf(out, "  %-13s %s\n", ex.dir, fn.Status.URL)
	}
	fmt.Fprintf(out, "  cron          %s fires %s every minute (see GET /v1/namespaces/%s/functions/%s/invocations)\n",
		exampleCron, exampleCronFunction, ns, exampleCronFunction)
	fmt.Fprintf(out, "\ntry: curl -s -X POST -d '{\"name\":\"you\"}' %s/fn/%s/hello-go\n", endpoint, ns)
	return nil
}

func deployExample(ctx context.Context, c *client.Client, ns, dir, name, runtime string) error {
	_, err := c.CreateFunction(ctx, ns, api.CreateFunction{Name: name, FunctionFields: api.FunctionFields{Runtime: &runtime}})
	if err != nil && !client.IsConflict(err) {
		return fmt.Errorf("function %s: %w", name, err)
	}
	data, _, err := sourcezip.Zip(dir)
	if err != nil {
		return fmt.Errorf("example %s: %w", name, err)
	}
	if _, err := c.UploadSource(ctx, ns, name, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("uploading %s: %w", name, err)
	}
	_, err = c.CreateTrigger(ctx, ns, api.CreateTrigger{Name: name + "-http", TriggerFields: api.TriggerFields{Type: ptr.To(api.TriggerHTTP), Function: &name}})
	if err != nil && !client.IsConflict(err) {
		return fmt.Errorf("http trigger of %s: %w", name, err)
	}
	return nil
}
