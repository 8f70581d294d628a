package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"sless.dev/sless/gateway/client"
)

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
