package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dsschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// A function's traffic: how its calls split between its revisions.

// trafficModel is one traffic entry; revision, latest and tag are null when unset.
type trafficModel struct {
	Revision types.String `tfsdk:"revision"`
	Latest   types.Bool   `tfsdk:"latest"`
	Percent  types.Int64  `tfsdk:"percent"`
	Tag      types.String `tfsdk:"tag"`
}

var trafficType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"revision": types.StringType, "latest": types.BoolType, "percent": types.Int64Type, "tag": types.StringType}}

const trafficDesc = "How the function's calls split between its revisions: a list of `{ revision | latest = true, percent, tag }`; " +
	"percents sum to 100. A revision is named `<name>-<n>` (see the `sless_function_revisions` data source); `latest = true` " +
	"follows the newest ready revision, so a build that fails never gets traffic. `tag` gives its revision a route of its own " +
	"(header `X-Sless-Tag`, host `<tag>-<name>.<namespace>.<functions domain>`), with no share unless `percent` says so. " +
	"Unset: the server's, which starts as all to latest and keeps what `sless traffic` or `sless rollback` set. " +
	"A change is a route change: nothing is rebuilt. `sless dev` only for now."

// trafficAttribute is the resource's traffic.
func trafficAttribute() schema.Attribute {
	return schema.ListNestedAttribute{
		Optional: true, Computed: true, MarkdownDescription: trafficDesc,
		Validators:    []validator.List{listvalidator.SizeBetween(1, rules.MaxTrafficTargets)},
		PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown()},
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"revision": schema.StringAttribute{Optional: true, MarkdownDescription: "A revision of the function, `<name>-<n>`."},
			"latest":   schema.BoolAttribute{Optional: true, MarkdownDescription: "`true`: the newest ready revision (set either this or `revision`)."},
			"percent":  schema.Int64Attribute{Required: true, MarkdownDescription: "Share of the calls, 0-100."},
			"tag": schema.StringAttribute{Optional: true, MarkdownDescription: "A route of its own: lowercase letters and digits, starting with a letter.",
				Validators: []validator.String{stringCheck{desc: "tag", check: rules.CheckTag}}},
		}},
	}
}

// trafficFields is the API's traffic for the configured list (nil when not configured).
func trafficFields(ctx context.Context, v types.List) (*[]api.TrafficTarget, diag.Diagnostics) {
	if v.IsNull() || v.IsUnknown() {
		return nil, nil
	}
	var entries []trafficModel
	diags := v.ElementsAs(ctx, &entries, false)
	out := make([]api.TrafficTarget, len(entries))
	for i, e := range entries {
		out[i] = api.TrafficTarget{Revision: e.Revision.ValueString(), Latest: e.Latest.ValueBool(), Percent: int32(e.Percent.ValueInt64()), Tag: e.Tag.ValueString()}
	}
	return &out, diags
}

// trafficState maps the API's traffic back (unset fields null, as a configuration leaves them).
func trafficState(ctx context.Context, traffic []api.TrafficTarget) (types.List, diag.Diagnostics) {
	out := make([]trafficModel, len(traffic))
	for i, t := range traffic {
		out[i] = trafficModel{Revision: stringOrNull(t.Revision), Latest: types.BoolNull(), Percent: types.Int64Value(int64(t.Percent)), Tag: stringOrNull(t.Tag)}
		if t.Latest {
			out[i].Latest = types.BoolValue(true)
		}
	}
	return types.ListValueFrom(ctx, trafficType, out)
}

// rolloutModel is the rollout policy block.
type rolloutModel struct {
	Steps        []types.Int64 `tfsdk:"steps"`
	IntervalSec  types.Int64   `tfsdk:"interval_sec"`
	MaxErrorRate types.Float64 `tfsdk:"max_error_rate"`
	MinRequests  types.Int64   `tfsdk:"min_requests"`
}

var rolloutType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"steps": types.ListType{ElemType: types.Int64Type}, "interval_sec": types.Int64Type, "max_error_rate": types.Float64Type, "min_requests": types.Int64Type}}

// rolloutAttribute is the resource's rollout policy.
func rolloutAttribute() schema.Attribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "A health-gated rollout: when a new revision becomes ready it gets `steps[0]` percent of what follows latest, " +
			"then the next step after each `interval_sec` in which its own calls (at least `min_requests`, from the invocation history) " +
			"failed at most `max_error_rate` (5xx, timeouts, crashes; callers that went away and 4xx count for nothing); above it the previous revision takes the share back at once and " +
			"the rollout stops, with the measured rate in the function's status (`sless describe function`). Unset: a new revision " +
			"takes latest's share at once. `sless dev` only for now.",
		Attributes: map[string]schema.Attribute{
			"steps": schema.ListAttribute{ElementType: types.Int64Type, Required: true, MarkdownDescription: "Rising percents, the last 100, e.g. `[10, 50, 100]`.",
				Validators: []validator.List{listvalidator.SizeBetween(1, rules.MaxRolloutSteps)}},
			"interval_sec":   schema.Int64Attribute{Required: true, MarkdownDescription: fmt.Sprintf("Seconds each step is held (1-%d).", rules.MaxRolloutIntervalSec)},
			"max_error_rate": schema.Float64Attribute{Required: true, MarkdownDescription: "Highest share of failed calls a step may see, 0-1 (0.05 is 5 %)."},
			"min_requests":   schema.Int64Attribute{Required: true, MarkdownDescription: "Calls a step needs before its rate counts; a step with fewer is held."},
		},
	}
}

// rolloutFields is the API's rollout for the configured block: {} (no steps) removes a
// policy the function has.
func rolloutFields(ctx context.Context, v types.Object) (*api.Rollout, diag.Diagnostics) {
	if v.IsUnknown() {
		return nil, nil
	}
	if v.IsNull() {
		return &api.Rollout{}, nil
	}
	var m rolloutModel
	diags := v.As(ctx, &m, basetypes.ObjectAsOptions{})
	r := &api.Rollout{IntervalSec: int32(m.IntervalSec.ValueInt64()), MaxErrorRate: m.MaxErrorRate.ValueFloat64(), MinRequests: int32(m.MinRequests.ValueInt64())}
	for _, s := range m.Steps {
		r.Steps = append(r.Steps, int32(s.ValueInt64()))
	}
	return r, diags
}

// rolloutState maps the API's rollout policy back (null when none).
func rolloutState(ctx context.Context, r *api.Rollout) (types.Object, diag.Diagnostics) {
	if r == nil {
		return types.ObjectNull(rolloutType.AttrTypes), nil
	}
	m := rolloutModel{IntervalSec: types.Int64Value(int64(r.IntervalSec)), MaxErrorRate: types.Float64Value(r.MaxErrorRate), MinRequests: types.Int64Value(int64(r.MinRequests))}
	for _, s := range r.Steps {
		m.Steps = append(m.Steps, types.Int64Value(int64(s)))
	}
	return types.ObjectValueFrom(ctx, rolloutType.AttrTypes, m)
}

var _ datasource.DataSourceWithConfigure = (*revisionsDataSource)(nil)

// NewRevisionsDataSource is the sless_function_revisions data source.
func NewRevisionsDataSource() datasource.DataSource { return &revisionsDataSource{} }

type revisionsDataSource struct {
	client *apiClient
}

type revisionModel struct {
	Name      types.String `tfsdk:"name"`
	Number    types.Int64  `tfsdk:"number"`
	CreatedAt types.String `tfsdk:"created_at"`
	Phase     types.String `tfsdk:"phase"`
	Message   types.String `tfsdk:"message"`
	Image     types.String `tfsdk:"image"`
	Percent   types.Int64  `tfsdk:"percent"`
	Tags      types.List   `tfsdk:"tags"`
}

type revisionsDataModel struct {
	Function  types.String    `tfsdk:"function"`
	Revisions []revisionModel `tfsdk:"revisions"`
}

func (d *revisionsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function_revisions"
}

func (d *revisionsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	str := func(desc string) dsschema.StringAttribute {
		return dsschema.StringAttribute{Computed: true, MarkdownDescription: desc}
	}
	resp.Schema = dsschema.Schema{
		MarkdownDescription: "Lists a function's revisions, oldest first: the immutable snapshots of what it runs, each with its phase, " +
			"its share of the traffic and its tags — the names a `traffic` block of `sless_function` can pin.",
		Attributes: map[string]dsschema.Attribute{
			"function": dsschema.StringAttribute{Required: true, MarkdownDescription: "Function name.", Validators: nameValidators()},
			"revisions": dsschema.ListNestedAttribute{
				Computed: true, MarkdownDescription: "The revisions, oldest first.",
				NestedObject: dsschema.NestedAttributeObject{Attributes: map[string]dsschema.Attribute{
					"name":       str("`<function>-<n>`."),
					"number":     dsschema.Int64Attribute{Computed: true, MarkdownDescription: "n; never reused."},
					"created_at": str("RFC 3339."),
					"phase":      str("`building`, `ready` or `failed`."),
					"message":    str("Why it failed, when it did."),
					"image":      str("What it runs once built."),
					"percent":    dsschema.Int64Attribute{Computed: true, MarkdownDescription: "Its share of the calls now."},
					"tags":       dsschema.ListAttribute{ElementType: types.StringType, Computed: true, MarkdownDescription: "Its routes of its own."},
				}},
			},
		},
	}
}

func (d *revisionsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if c, ok := configuredClient(req.ProviderData, &resp.Diagnostics); ok {
		d.client = c
	}
}

func (d *revisionsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	operation(ctx, "data.sless_function_revisions.read", d.client, req.Config.Get, &resp.Diagnostics, func(ctx context.Context, m revisionsDataModel) {
		name := m.Function.ValueString()
		revs, err := d.client.ListRevisions(ctx, d.client.namespace, name)
		if err != nil {
			resp.Diagnostics.AddError("Cannot read the revisions of function "+name, err.Error())
			return
		}
		m.Revisions = make([]revisionModel, len(revs))
		for i, r := range revs {
			tags, diags := types.ListValueFrom(ctx, types.StringType, r.Tags)
			resp.Diagnostics.Append(diags...)
			m.Revisions[i] = revisionModel{Name: types.StringValue(r.Name), Number: types.Int64Value(r.Number),
				CreatedAt: types.StringValue(r.CreatedAt.Format("2006-01-02T15:04:05Z07:00")), Phase: types.StringValue(r.Status.Phase),
				Message: types.StringValue(r.Status.Message), Image: types.StringValue(r.Status.Image),
				Percent: types.Int64Value(int64(r.Percent)), Tags: tags}
		}
		resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
	})
}
