package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.dev/sless/gateway/client"
)

var _ datasource.DataSourceWithConfigure = (*functionDataSource)(nil)

// NewFunctionDataSource is the sless_function data source.
func NewFunctionDataSource() datasource.DataSource { return &functionDataSource{} }

type functionDataSource struct {
	client *apiClient
}

type functionDataModel struct {
	objectRef
	functionSettings
	functionStatus
	Ready types.Bool `tfsdk:"ready"`
}

func (d *functionDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func (d *functionDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	computed := func(desc string) schema.Int64Attribute {
		return schema.Int64Attribute{Computed: true, MarkdownDescription: desc}
	}
	str := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	refs := secretRefDataAttributes()
	resp.Schema = schema.Schema{
		MarkdownDescription: "Looks up a function of the tenant by name, e.g. one deployed by another configuration, to use its `url`.",
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				Required: true, MarkdownDescription: "Function name.", Validators: nameValidators(),
			},
			"id":                      str("`namespace/name`."),
			"namespace":               str("Tenant namespace."),
			"runtime":                 str("Language runtime."),
			"entrypoint":              str("Handler entry point (null for the runtime default)."),
			"env_vars":                schema.MapAttribute{ElementType: types.StringType, Computed: true, MarkdownDescription: "Environment variables."},
			"memory_mb":               computed("Memory limit in MiB."),
			"timeout_sec":             computed("Invocation limit in seconds; null means no limit."),
			"min_replicas":            computed("Instances kept when idle."),
			"max_replicas":            computed("Upper bound of instances."),
			"scale_down_period_sec":   computed("Idle seconds before scaling down."),
			"scaling_metric":          str("`concurrency` or `requestRate`."),
			"scaling_target":          computed("Target of the scaling metric per instance."),
			"stream_idle_timeout_sec": computed("Seconds a streamed answer or a WebSocket may pass no byte before the gateway ends it."),
			"async_enabled":           schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether it takes asynchronous invocations."},
			"async_max_attempts":      computed("Attempts of one asynchronous invocation."),
			"async_backoff_ms":        computed("Delay before the second asynchronous attempt in ms."),
			"async_dead_letter_queue": str("Queue of exhausted asynchronous invocations (null: the default)."),
			"async_max_jobs":          computed("Dispatcher Jobs that may drain the asynchronous queue at once."),
			"url":                     str("URL that invokes the function."),
			"image":                   str("Built image."),
			"phase":                   str("Pending, Building, Ready or Failed."),
			"ready":                   schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the latest configuration is built and serving."},
			"latest_created_revision": str("The newest revision."),
			"latest_ready_revision":   str("The newest revision that can serve."),
			"revision_history_limit":  computed("Revisions kept without traffic or a tag."),
			"rollout": schema.SingleNestedAttribute{
				Computed: true, MarkdownDescription: "The health-gated rollout policy (null: none).",
				Attributes: map[string]schema.Attribute{
					"steps":          schema.ListAttribute{ElementType: types.Int64Type, Computed: true, MarkdownDescription: "Rising percents."},
					"interval_sec":   computed("Seconds each step is held."),
					"max_error_rate": schema.Float64Attribute{Computed: true, MarkdownDescription: "Highest share of failed calls."},
					"min_requests":   computed("Calls a step needs before its rate counts."),
				},
			},
			"traffic": schema.ListNestedAttribute{
				Computed: true, MarkdownDescription: "How calls split between its revisions: `{ revision, latest, percent, tag }`.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"revision": str("A revision name (null for latest)."), "latest": schema.BoolAttribute{Computed: true, MarkdownDescription: "Follows the newest ready revision."},
					"percent": computed("Share of the calls."), "tag": str("Route of its own."),
				}},
			},
			"secret_env":   refs["secret_env"],
			"secret_files": refs["secret_files"],
		},
	}
}

func (d *functionDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if c, ok := configuredClient(req.ProviderData, &resp.Diagnostics); ok {
		d.client = c
	}
}

func (d *functionDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	operation(ctx, "data.sless_function.read", d.client, req.Config.Get, &resp.Diagnostics, func(ctx context.Context, m functionDataModel) {
		name := m.Name.ValueString()
		fn, err := d.client.GetFunction(ctx, d.client.namespace, name)
		if client.IsNotFound(err) {
			resp.Diagnostics.AddError("Function not found", fmt.Sprintf("No function %s in namespace %s.", name, d.client.namespace))
			return
		}
		if err != nil {
			resp.Diagnostics.AddError("Cannot read function "+name, err.Error())
			return
		}
		settings, diags := functionSettingsFrom(ctx, fn, functionSettings{})
		resp.Diagnostics.Append(diags...)
		m.ID = objectID(fn.Namespace, fn.Name)
		m.Namespace = types.StringValue(fn.Namespace)
		m.functionSettings = settings
		m.functionStatus = functionStatusFrom(fn)
		m.Ready = types.BoolValue(fn.Status.Ready)
		resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	})
}
