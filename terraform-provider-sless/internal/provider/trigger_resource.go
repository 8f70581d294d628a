package provider

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

var _ resource.ResourceWithValidateConfig = (*triggerResource)(nil)

// NewTriggerResource is the sless_trigger resource.
func NewTriggerResource() resource.Resource {
	// A trigger's state is all from the API: nothing of the prior one is kept.
	modelFrom := func(_ context.Context, t api.Trigger, _ triggerModel) (triggerModel, diag.Diagnostics) {
		return triggerModelFrom(t), nil
	}
	return &triggerResource{newResourceBase(triggerRemote, modelFrom)}
}

type triggerResource struct {
	resourceBase[triggerModel, api.Trigger]
}

type triggerModel struct {
	objectRef
	Function        types.String `tfsdk:"function"`
	Type            types.String `tfsdk:"type"`
	Enabled         types.Bool   `tfsdk:"enabled"`
	RequireAuth     types.Bool   `tfsdk:"require_auth"`
	Schedule        types.String `tfsdk:"schedule"`
	Timezone        types.String `tfsdk:"timezone"`
	PrewarmSeconds  types.Int64  `tfsdk:"prewarm_seconds"`
	Queue           types.String `tfsdk:"queue"`
	BrokerSecret    types.String `tfsdk:"broker_secret"`
	BrokerSecretKey types.String `tfsdk:"broker_secret_key"`
	MaxAttempts     types.Int64  `tfsdk:"max_attempts"`
	BackoffMs       types.Int64  `tfsdk:"backoff_ms"`
	DeadLetterQueue types.String `tfsdk:"dead_letter_queue"`
	URL             types.String `tfsdk:"url"`
	Active          types.Bool   `tfsdk:"active"`
	Source          types.String `tfsdk:"source"`
}

func (r *triggerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := objectAttributes("Trigger name, a DNS label. Changing it replaces the trigger.", "Tenant namespace.")
	maps.Copy(attrs, map[string]schema.Attribute{
		"function": schema.StringAttribute{
			Required: true, MarkdownDescription: "Name of the function it invokes; the trigger waits for a function that is not Ready yet.",
			Validators: nameValidators(),
		},
		"type": schema.StringAttribute{
			Required: true, MarkdownDescription: triggerTypes() + ". Changing it replaces the trigger.",
			Validators:    []validator.String{stringvalidator.OneOf(triggerTypeNames()...)},
			PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
		},
		"enabled": schema.BoolAttribute{
			Optional: true, Computed: true, Default: booldefault.StaticBool(true),
			MarkdownDescription: "`false` freezes the trigger; toggling it updates in place (no re-create).",
		},
		"require_auth": schema.BoolAttribute{
			Optional: true, Computed: true, Default: booldefault.StaticBool(false),
			MarkdownDescription: "http only: callers must send a valid Bearer token.",
		},
		"schedule": schema.StringAttribute{
			Optional: true, MarkdownDescription: "cron only: five fields (minute hour day-of-month month day-of-week) or a macro such as `@hourly` (not `@every`), checked at plan time as the API checks it.",
			Validators: []validator.String{stringCheck{desc: "cron schedule", check: rules.CheckSchedule}},
		},
		"timezone": schema.StringAttribute{
			Optional: true, MarkdownDescription: "cron only: IANA zone the schedule is read in (default UTC), e.g. `Europe/Berlin`.",
			Validators: []validator.String{stringCheck{desc: "time zone", check: rules.CheckTimezone}},
		},
		"prewarm_seconds": schema.Int64Attribute{
			Optional: true, MarkdownDescription: fmt.Sprintf("cron only: wake the function this many seconds before each tick (through the normal invocation path; the handler is not called) so the tick pays no cold start; it scales down after the tick as usual. 1-%d; unset: no pre-warm.", rules.MaxPrewarmSeconds),
			Validators: []validator.Int64{int64validator.Between(1, rules.MaxPrewarmSeconds)},
		},
		"queue": schema.StringAttribute{
			Optional: true, MarkdownDescription: "event only: AMQP queue to consume, named `<namespace>.<name>` (a tenant's queues start with its namespace).",
			Validators: []validator.String{stringvalidator.LengthBetween(1, rules.MaxQueueLength)},
		},
		"broker_secret": schema.StringAttribute{
			Optional: true, MarkdownDescription: "event only: name of the Secret holding the broker's `amqp://` URL.",
			Validators: []validator.String{stringvalidator.LengthBetween(1, rules.MaxSecretNameLength)},
		},
		"broker_secret_key": schema.StringAttribute{
			Optional: true, Computed: true, MarkdownDescription: "event only: key of the URL in the Secret (server default `" + rules.DefaultBrokerSecretKey + "`).",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		},
		"max_attempts": serverDefaultInt64(fmt.Sprintf("event only: deliveries of one message before it goes to the dead-letter queue (1-%d; server default %d).", rules.MaxAttempts, rules.DefaultMaxAttempts), 1, rules.MaxAttempts),
		"backoff_ms":   serverDefaultInt64(fmt.Sprintf("event only: delay before the first retry, doubled per attempt (0-%d; server default %d).", rules.MaxBackoffMillis, rules.DefaultBackoffMillis), 0, rules.MaxBackoffMillis),
		"dead_letter_queue": schema.StringAttribute{
			Optional: true, MarkdownDescription: "event only: queue that receives messages whose attempts ran out, named `<namespace>.<name>`.",
			Validators: []validator.String{stringvalidator.LengthBetween(1, rules.MaxQueueLength)},
		},
		"url":    computedString("http only: URL that invokes the function."),
		"active": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the trigger is currently firing (enabled and its function Ready)."},
		// Not kept from the state in a plan: it follows the spec (a schedule, a queue).
		"source": schema.StringAttribute{Computed: true, MarkdownDescription: "Where the trigger's calls come from, for people: its URL, schedule or queue, " +
			"as the API words it for the trigger's type (the text `sless get triggers` and the console show)."},
	})
	resp.Schema = schema.Schema{
		MarkdownDescription: "A trigger that invokes a function: `http` (its public URL), `cron` (exact ticks of `schedule`) " +
			"or `event` (each message of an AMQP `queue`). `enabled = false` freezes it in place: an http function scales " +
			"to zero and refuses calls, a cron trigger stops firing, an event trigger stops consuming.",
		Attributes: attrs,
	}
}

// triggerTypeNames are the trigger kinds' types.
func triggerTypeNames() []string {
	names := make([]string, len(api.TriggerKinds))
	for i, k := range api.TriggerKinds {
		names[i] = k.Name
	}
	return names
}

// triggerTypes lists the types for the schema's description: "`http`, `cron` or `event`".
func triggerTypes() string {
	names := triggerTypeNames()
	for i, n := range names {
		names[i] = "`" + n + "`"
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ValidateConfig rejects fields that do not belong to the trigger's type at plan time.
func (r *triggerResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	validateConfig(ctx, req, resp, checkTriggerFields)
}

// checkTriggerFields checks that the fields of m's type are set and no others; an unknown
// type is checked once it is known.
func checkTriggerFields(m triggerModel) diag.Diagnostics {
	var diags diag.Diagnostics
	if m.Type.IsUnknown() {
		return diags
	}
	typ := m.Type.ValueString()
	set := map[string]bool{
		"schedule":          !m.Schedule.IsNull(),
		"timezone":          !m.Timezone.IsNull(),
		"prewarm_seconds":   !m.PrewarmSeconds.IsNull(),
		"queue":             !m.Queue.IsNull(),
		"broker_secret":     !m.BrokerSecret.IsNull(),
		"broker_secret_key": !m.BrokerSecretKey.IsNull(),
		"max_attempts":      !m.MaxAttempts.IsNull(),
		"backoff_ms":        !m.BackoffMs.IsNull(),
		"dead_letter_queue": !m.DeadLetterQueue.IsNull(),
		"require_auth":      !m.RequireAuth.IsNull() && m.RequireAuth.ValueBool(),
	}
	// Each kind's fields, as the kinds' packages describe them (api.TriggerKinds).
	for _, k := range api.TriggerKinds {
		for _, f := range k.Fields {
			switch {
			case set[f.Name] && k.Name != typ:
				diags.AddAttributeError(path.Root(f.Name), "Attribute does not apply to a "+typ+" trigger",
					fmt.Sprintf("%s is a %s trigger setting; remove it or change type to %q.", f.Name, k.Name, k.Name))
			case !set[f.Name] && f.Required && k.Name == typ:
				diags.AddAttributeError(path.Root(f.Name), "Missing "+f.Name, fmt.Sprintf("A %s trigger needs %s.", typ, f.Name))
			}
		}
	}
	return diags
}

// fields is the API request for m: every configurable field, so an update also clears what
// was removed from the configuration.
func (m triggerModel) fields() api.TriggerFields {
	enabled, requireAuth := m.Enabled.ValueBool(), m.RequireAuth.ValueBool()
	return api.TriggerFields{
		Type:            setString(m.Type),
		Function:        setString(m.Function),
		Enabled:         &enabled,
		RequireAuth:     &requireAuth,
		Schedule:        clearingString(m.Schedule),
		Timezone:        clearingString(m.Timezone),
		PrewarmSeconds:  new(int32(m.PrewarmSeconds.ValueInt64())), // 0 for null: none
		Queue:           clearingString(m.Queue),
		BrokerSecret:    clearingString(m.BrokerSecret),
		BrokerSecretKey: setString(m.BrokerSecretKey),
		MaxAttempts:     setInt32(m.MaxAttempts),
		BackoffMs:       setInt32(m.BackoffMs),
		DeadLetterQueue: clearingString(m.DeadLetterQueue),
	}
}

// triggerModelFrom is the state of t.
func triggerModelFrom(t api.Trigger) triggerModel {
	return triggerModel{
		objectRef:       objectRefOf(t.Namespace, t.Name),
		Function:        types.StringValue(t.Function),
		Type:            types.StringValue(t.Type),
		Enabled:         types.BoolValue(t.Enabled),
		RequireAuth:     types.BoolValue(t.RequireAuth),
		Schedule:        stringOrNull(t.Schedule),
		Timezone:        stringOrNull(t.Timezone),
		PrewarmSeconds:  int64OrNull(t.PrewarmSeconds),
		Queue:           stringOrNull(t.Queue),
		BrokerSecret:    stringOrNull(t.BrokerSecret),
		BrokerSecretKey: stringOrNull(t.BrokerSecretKey),
		MaxAttempts:     types.Int64Value(int64(t.MaxAttempts)),
		BackoffMs:       types.Int64Value(int64(t.BackoffMs)),
		DeadLetterQueue: stringOrNull(t.DeadLetterQueue),
		URL:             stringOrNull(t.Status.URL),
		Active:          types.BoolValue(t.Status.Active),
		Source:          stringOrNull(t.Status.Source),
	}
}

func (r *triggerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	operation(ctx, "sless_trigger.create", r.client, req.Plan.Get, &resp.Diagnostics, func(ctx context.Context, plan triggerModel) {
		name := plan.Name.ValueString()
		t, err := r.client.CreateTrigger(ctx, r.client.namespace, api.CreateTrigger{Name: name, TriggerFields: plan.fields()})
		if err != nil {
			createFailed(&resp.Diagnostics, r.client, "trigger", name, err)
			return
		}
		r.settle(ctx, t, api.TriggerStatus{}, &resp.State, &resp.Diagnostics)
	})
}

// settle records t once its status reflects the change (or after a short wait).
func (r *triggerResource) settle(ctx context.Context, t api.Trigger, prev api.TriggerStatus, st *tfsdk.State, diags *diag.Diagnostics) {
	t, err := waitTriggerSettled(ctx, r.client, t, prev)
	if err != nil {
		diags.AddError("Cannot read trigger "+t.Name, err.Error())
	}
	r.record(ctx, t, triggerModel{}, st, diags)
}

// Update patches the trigger in place; enabled, the function and the schedule all change
// without a re-create.
func (r *triggerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	operation(ctx, "sless_trigger.update", r.client, req.Plan.Get, &resp.Diagnostics, func(ctx context.Context, plan triggerModel) {
		name := plan.Name.ValueString()
		before, err := r.client.GetTrigger(ctx, r.client.namespace, name)
		if err != nil {
			resp.Diagnostics.AddError("Cannot read trigger "+name, err.Error())
			return
		}
		t, err := r.client.UpdateTrigger(ctx, r.client.namespace, name, plan.fields())
		if err != nil {
			resp.Diagnostics.AddError("Cannot update trigger "+name, err.Error())
			return
		}
		r.settle(ctx, t, before.Status, &resp.State, &resp.Diagnostics)
	})
}
