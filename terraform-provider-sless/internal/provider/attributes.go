package provider

import (
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// Schema attributes the resources share. Every object has id, name and namespace (the
// objectRef of its model); what the server computes keeps its state value until a change
// makes it unknown.

// objectAttributes are the schema attributes of objectRef: name as nameDesc describes it
// (changing it replaces the object), namespace as nsDesc does.
func objectAttributes(nameDesc, nsDesc string) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"id":        computedString("`namespace/name`."),
		"namespace": computedString(nsDesc),
		"name": schema.StringAttribute{
			Required: true, MarkdownDescription: nameDesc,
			Validators: nameValidators(), PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
		},
	}
}

// computedString is a string the server reports, kept from the state in a plan.
func computedString(desc string) schema.StringAttribute {
	return schema.StringAttribute{
		Computed: true, MarkdownDescription: desc,
		PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
	}
}

// computedInt64 is a number the server reports, kept from the state in a plan.
func computedInt64(desc string) schema.Int64Attribute {
	return schema.Int64Attribute{
		Computed: true, MarkdownDescription: desc,
		PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
	}
}

// serverDefaultInt64 is an optional number between lo and hi that the server defaults when it
// is not set; the default it reports is kept from the state in a plan.
func serverDefaultInt64(desc string, lo, hi int64) schema.Int64Attribute {
	return schema.Int64Attribute{
		Optional: true, Computed: true, MarkdownDescription: desc,
		Validators:    []validator.Int64{int64validator.Between(lo, hi)},
		PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
	}
}

// maxApplyWaitSec bounds every wait of `apply` a configuration may ask for: a day.
const maxApplyWaitSec = 86400

// applyWaitAttribute is how long `apply` waits for an object to settle, in seconds (1 to a
// day; def when not set).
func applyWaitAttribute(desc string, def int64) schema.Int64Attribute {
	return schema.Int64Attribute{
		Optional: true, Computed: true, Default: int64default.StaticInt64(def), MarkdownDescription: desc,
		Validators: []validator.Int64{int64validator.Between(1, maxApplyWaitSec)},
	}
}
