package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
)

// remote is how a resource type reaches its API object by name in a namespace: method
// expressions of client.Client, bound only once the provider is configured.
type remote[O any] struct {
	kind string // "function", "trigger", "job"
	get  func(c *client.Client, ctx context.Context, ns, name string) (O, error)
	del  func(c *client.Client, ctx context.Context, ns, name string) error
}

var (
	functionRemote = remote[api.Function]{kind: "function", get: (*client.Client).GetFunction, del: (*client.Client).DeleteFunction}
	triggerRemote  = remote[api.Trigger]{kind: "trigger", get: (*client.Client).GetTrigger, del: (*client.Client).DeleteTrigger}
	jobRemote      = remote[api.Job]{kind: "job", get: (*client.Client).GetJob, del: (*client.Client).DeleteJob}
)

// named is a resource model: its name attribute identifies the API object.
type named interface{ objectName() string }

func (m functionModel) objectName() string { return m.Name.ValueString() }
func (m triggerModel) objectName() string  { return m.Name.ValueString() }
func (m jobModel) objectName() string      { return m.Name.ValueString() }

// loadModel reads a configured resource's plan or state (get is Plan.Get or State.Get) into
// its model.
func loadModel[M any](ctx context.Context, c *apiClient, get func(context.Context, any) diag.Diagnostics, diags *diag.Diagnostics) (M, bool) {
	var m M
	if !c.configured(diags) {
		return m, false
	}
	diags.Append(get(ctx, &m)...)
	return m, !diags.HasError()
}

// readResource is every resource's Read: it fetches the object named in the state and hands
// it to record, or drops the resource from the state when the object is gone.
func readResource[M named, O any](ctx context.Context, c *apiClient, rm remote[O], req resource.ReadRequest, resp *resource.ReadResponse, record func(context.Context, M, O)) {
	ctx, end := startSpan(ctx, "sless_"+rm.kind+".read")
	defer end(&resp.Diagnostics)
	state, ok := loadModel[M](ctx, c, req.State.Get, &resp.Diagnostics)
	if !ok {
		return
	}
	name := state.objectName()
	obj, err := rm.get(c.Client, ctx, c.namespace, name)
	if client.IsNotFound(err) {
		tflog.Warn(ctx, rm.kind+" is gone; removing it from the state", map[string]any{rm.kind: name})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read "+rm.kind+" "+name, err.Error())
		return
	}
	record(ctx, state, obj)
}

// deleteResource is every resource's Delete.
func deleteResource[M named, O any](ctx context.Context, c *apiClient, rm remote[O], req resource.DeleteRequest, resp *resource.DeleteResponse) {
	ctx, end := startSpan(ctx, "sless_"+rm.kind+".delete")
	defer end(&resp.Diagnostics)
	state, ok := loadModel[M](ctx, c, req.State.Get, &resp.Diagnostics)
	if !ok {
		return
	}
	name := state.objectName()
	deleteAndWait(ctx, &resp.Diagnostics, rm.kind, name,
		func() error { return rm.del(c.Client, ctx, c.namespace, name) },
		func() error {
			_, err := rm.get(c.Client, ctx, c.namespace, name)
			return err
		})
}

// deleteAndWait deletes kind name with del and waits until get reports it gone, so a destroy
// returns only when the object really is; an object already gone is not an error.
func deleteAndWait(ctx context.Context, diags *diag.Diagnostics, kind, name string, del, get func() error) {
	err := del()
	if err == nil {
		err = waitGone(ctx, kind+" "+name, get)
	}
	if err != nil && !client.IsNotFound(err) {
		diags.AddError("Cannot delete "+kind+" "+name, err.Error())
	}
}

// importByName is every resource's ImportState: the ID is "name" or "namespace/name".
func importByName(ctx context.Context, typeName string, c *apiClient, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ctx, end := startSpan(ctx, typeName+".import")
	defer end(&resp.Diagnostics)
	if !c.configured(&resp.Diagnostics) {
		return
	}
	name, err := importName(req.ID, c.namespace)
	if err != nil {
		resp.Diagnostics.AddError("Invalid import ID", err.Error())
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
}
