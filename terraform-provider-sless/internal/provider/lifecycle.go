package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
)

// remote is how a resource type reaches its API object by name in a namespace: method
// expressions of client.Client, bound only once the provider is configured.
type remote[O any] struct {
	kind string // "function", "trigger", "job", "secret"
	get  func(c *client.Client, ctx context.Context, ns, name string) (O, error)
	del  func(c *client.Client, ctx context.Context, ns, name string) error
}

var (
	functionRemote = remote[api.Function]{kind: "function", get: (*client.Client).GetFunction, del: (*client.Client).DeleteFunction}
	triggerRemote  = remote[api.Trigger]{kind: "trigger", get: (*client.Client).GetTrigger, del: (*client.Client).DeleteTrigger}
	jobRemote      = remote[api.Job]{kind: "job", get: (*client.Client).GetJob, del: (*client.Client).DeleteJob}
	secretRemote   = remote[api.Secret]{kind: "secret", get: (*client.Client).GetSecret, del: (*client.Client).DeleteSecret}
)

// named is a resource model: its name attribute identifies the API object. The models get
// objectName from the objectRef they embed.
type named interface{ objectName() string }

// objectRef is the identity every resource model starts with.
type objectRef struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Namespace types.String `tfsdk:"namespace"`
}

// objectRefOf is the identity of the API object name in namespace ns.
func objectRefOf(ns, name string) objectRef {
	return objectRef{ID: objectID(ns, name), Name: types.StringValue(name), Namespace: types.StringValue(ns)}
}

func (o objectRef) objectName() string { return o.Name.ValueString() }

// resourceBase is what the resources share: the API client from Configure, the type name,
// recording an object in the state, Read, and Delete and ImportState by name. M is the
// resource's model, O its API object.
type resourceBase[M named, O any] struct {
	remote remote[O]
	// modelFrom is the state of obj; prior is the plan or state it replaces, which keeps
	// what the API does not report.
	modelFrom func(ctx context.Context, obj O, prior M) (M, diag.Diagnostics)
	client    *apiClient
}

func newResourceBase[M named, O any](rm remote[O], modelFrom func(context.Context, O, M) (M, diag.Diagnostics)) resourceBase[M, O] {
	return resourceBase[M, O]{remote: rm, modelFrom: modelFrom}
}

// The resources get these from resourceBase.
var _ = []interface {
	resource.ResourceWithConfigure
	resource.ResourceWithImportState
}{(*functionResource)(nil), (*triggerResource)(nil), (*jobResource)(nil), (*secretResource)(nil)}

func (r *resourceBase[M, O]) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_" + r.remote.kind
}

func (r *resourceBase[M, O]) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if c, ok := configuredClient(req.ProviderData, &resp.Diagnostics); ok {
		r.client = c
	}
}

// record writes the state of obj, converted with prior, to st.
func (r *resourceBase[M, O]) record(ctx context.Context, obj O, prior M, st *tfsdk.State, diags *diag.Diagnostics) {
	m, d := r.modelFrom(ctx, obj, prior)
	diags.Append(d...)
	diags.Append(st.Set(ctx, &m)...)
}

func (r *resourceBase[M, O]) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readResource(ctx, r.client, r.remote, req, resp, func(ctx context.Context, state M, obj O) {
		r.record(ctx, obj, state, &resp.State, &resp.Diagnostics)
	})
}

func (r *resourceBase[M, O]) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	deleteResource[M](ctx, r.client, r.remote, req, resp)
}

func (r *resourceBase[M, O]) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importByName(ctx, "sless_"+r.remote.kind, r.client, req, resp)
}

// configuredClient is the client in the provider data handed to a Configure; data of
// another type is an error diagnostic.
func configuredClient(data any, diags *diag.Diagnostics) (*apiClient, bool) {
	c, ok := clientFrom(data)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("got %T; this is a bug in the provider", data))
	}
	return c, ok
}

// getter reads a plan, state or configuration into a model: Plan.Get, State.Get or
// Config.Get.
type getter = func(context.Context, any) diag.Diagnostics

// loadModel reads a configured resource's plan or state (or a data source's configuration)
// into its model.
func loadModel[M any](ctx context.Context, c *apiClient, get getter, diags *diag.Diagnostics) (M, bool) {
	var m M
	if !c.configured(diags) {
		return m, false
	}
	diags.Append(get(ctx, &m)...)
	return m, !diags.HasError()
}

// operation runs one operation of a resource or data source in its span (e.g.
// "sless_trigger.create") on the model get reads, once the provider is configured.
func operation[M any](ctx context.Context, span string, c *apiClient, get getter, diags *diag.Diagnostics, run func(context.Context, M)) {
	ctx, end := startSpan(ctx, span)
	defer end(diags)
	if m, ok := loadModel[M](ctx, c, get, diags); ok {
		run(ctx, m)
	}
}

// validateConfig is a resource's ValidateConfig: check reports what is wrong with the
// configuration read into the model M.
func validateConfig[M any](ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse, check func(M) diag.Diagnostics) {
	var m M
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if !resp.Diagnostics.HasError() {
		resp.Diagnostics.Append(check(m)...)
	}
}

// request is a model that converts to an API request F.
type request[F any] interface {
	fields(context.Context) (F, diag.Diagnostics)
}

// withRequest runs a Create or Update in its span (e.g. "sless_function.update") on the plan,
// the prior state (read when prior is not nil; zero for a Create) and the plan's API request.
func withRequest[M request[F], F any](ctx context.Context, span string, c *apiClient, plan tfsdk.Plan, prior *tfsdk.State, diags *diag.Diagnostics, run func(ctx context.Context, plan, state M, fields F)) {
	ctx, end := startSpan(ctx, span)
	defer end(diags)
	if !c.configured(diags) {
		return
	}
	var p, s M
	diags.Append(plan.Get(ctx, &p)...)
	if prior != nil {
		diags.Append(prior.Get(ctx, &s)...)
	}
	if diags.HasError() {
		return
	}
	fields, d := p.fields(ctx)
	diags.Append(d...)
	if diags.HasError() {
		return
	}
	run(ctx, p, s, fields)
}

// createFailed reports err of creating kind name; a conflict says how to adopt the object.
func createFailed(diags *diag.Diagnostics, c *apiClient, kind, name string, err error) {
	if client.IsConflict(err) {
		title := strings.ToUpper(kind[:1]) + kind[1:]
		diags.AddError(title+" already exists",
			fmt.Sprintf("%s %s exists in namespace %s; adopt it with `terraform import <address> %s` or pick another name.", title, name, c.namespace, name))
		return
	}
	diags.AddError("Cannot create "+kind+" "+name, err.Error())
}

// withState runs op (e.g. "read") of a resource in its span, on the model of its state and
// the object name in it.
func withState[M named, O any](ctx context.Context, c *apiClient, rm remote[O], op string, st tfsdk.State, diags *diag.Diagnostics, run func(ctx context.Context, state M, name string)) {
	operation(ctx, "sless_"+rm.kind+"."+op, c, st.Get, diags, func(ctx context.Context, state M) {
		run(ctx, state, state.objectName())
	})
}

// readResource is every resource's Read: it fetches the object named in the state and hands
// it to record, or drops the resource from the state when the object is gone.
func readResource[M named, O any](ctx context.Context, c *apiClient, rm remote[O], req resource.ReadRequest, resp *resource.ReadResponse, record func(context.Context, M, O)) {
	withState(ctx, c, rm, "read", req.State, &resp.Diagnostics, func(ctx context.Context, state M, name string) {
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
	})
}

// deleteResource is every resource's Delete.
func deleteResource[M named, O any](ctx context.Context, c *apiClient, rm remote[O], req resource.DeleteRequest, resp *resource.DeleteResponse) {
	withState(ctx, c, rm, "delete", req.State, &resp.Diagnostics, func(ctx context.Context, _ M, name string) {
		deleteAndWait(ctx, &resp.Diagnostics, rm.kind, name,
			func() error { return rm.del(c.Client, ctx, c.namespace, name) },
			func() error {
				_, err := rm.get(c.Client, ctx, c.namespace, name)
				return err
			})
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
