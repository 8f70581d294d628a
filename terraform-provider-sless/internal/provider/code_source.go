package provider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"sless.dev/sless/buildkit/sourcezip"
)

// codeSource is the code a function or self-contained job is built from: a directory the
// provider zips, or a prepared zip with a hash the user computes.
type codeSource struct {
	SourceDir  types.String `tfsdk:"source_dir"`
	CodePath   types.String `tfsdk:"code_path"`
	CodeHash   types.String `tfsdk:"code_hash"`
	SourceHash types.String `tfsdk:"source_hash"`
}

// codeSourceAttributes are the schema attributes of codeSource; of is "function" or "job".
func codeSourceAttributes(of string) map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"source_dir": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Directory with the " + of + "'s handler source. The provider zips it as `sless deploy` does, byte for byte " +
				"(sorted paths, fixed timestamps; left out: `" + strings.Join(sourcezip.DefaultIgnore, "`, `") + "` and what the folder's `" +
				sourcezip.IgnoreFile + "` lists, in `.dockerignore` syntax) and hashes every file into `source_hash` at plan time.",
		},
		"code_path": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Path of a prepared zip of the " + of + "'s source; requires `code_hash`.",
			Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("code_hash"))},
		},
		"code_hash": schema.StringAttribute{
			Optional: true, MarkdownDescription: "Hash of the code in `code_path`, e.g. `filesha256(\"handler.zip\")`; changing it uploads the zip again.",
			Validators: []validator.String{stringvalidator.AlsoRequires(path.MatchRoot("code_path"))},
		},
		"source_hash": schema.StringAttribute{
			Computed: true, MarkdownDescription: "Content hash of `source_dir` (sha256 over paths, executable bits and contents), or `code_hash`.",
		},
	}
}

// has reports whether any code is configured.
func (c codeSource) has() bool { return !c.SourceDir.IsNull() || !c.CodePath.IsNull() }

// plannedHash is source_hash for a plan: the directory's content hash, or code_hash.
func (c codeSource) plannedHash(diags *diag.Diagnostics) types.String {
	switch {
	case c.SourceDir.IsUnknown():
		return types.StringUnknown()
	case !c.SourceDir.IsNull():
		h, err := sourcezip.Hash(c.SourceDir.ValueString())
		if err != nil {
			diags.AddAttributeError(path.Root("source_dir"), "Cannot read source_dir", err.Error())
			return types.StringUnknown()
		}
		return types.StringValue(h)
	}
	return c.CodeHash
}

// forState is c as the state records it: the state holds no unknown values, so a
// source_hash the plan did not know is null.
func (c codeSource) forState() codeSource {
	if c.SourceHash.IsUnknown() {
		c.SourceHash = types.StringNull()
	}
	return c
}

// code is the codeSource a resource model embeds; see codeModel.
func (c *codeSource) code() *codeSource { return c }

// codeModel is a pointer to the model of a resource built from a codeSource (M is
// functionModel or jobModel).
type codeModel[M any] interface {
	*M
	code() *codeSource
}

// planCode starts the ModifyPlan of a resource built from a codeSource: it reads the plan,
// and the prior state (if any) into state unless state is nil, and sets the plan's
// source_hash to the hash of the planned code, so that an edit of any file in source_dir is
// a planned change. It reports false on a destroy or when they cannot be read; the caller
// sets the plan.
func planCode[M any, P codeModel[M]](ctx context.Context, req resource.ModifyPlanRequest, state *M, diags *diag.Diagnostics) (M, bool) {
	var plan M
	if req.Plan.Raw.IsNull() {
		return plan, false
	}
	diags.Append(req.Plan.Get(ctx, &plan)...)
	if state != nil && !req.State.Raw.IsNull() {
		diags.Append(req.State.Get(ctx, state)...)
	}
	if diags.HasError() {
		return plan, false
	}
	c := P(&plan).code()
	c.SourceHash = c.plannedHash(diags)
	return plan, true
}

// open returns the zip to upload.
func (c codeSource) open() (io.ReadCloser, error) {
	if !c.SourceDir.IsNull() {
		data, _, err := sourcezip.Zip(c.SourceDir.ValueString())
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	f, err := os.Open(c.CodePath.ValueString())
	if err != nil {
		return nil, fmt.Errorf("code_path: %w", err)
	}
	return f, nil
}

// attr is the attribute to blame for unreadable code.
func (c codeSource) attr() path.Path {
	if !c.SourceDir.IsNull() {
		return path.Root("source_dir")
	}
	return path.Root("code_path")
}

// upload sends the code of kind ("function" or "job") name with send, the upload call.
func (c codeSource) upload(ctx context.Context, kind, name string, send func(io.Reader) error, diags *diag.Diagnostics) bool {
	tflog.Info(ctx, "uploading "+kind+" source", map[string]any{kind: name, "source_hash": c.SourceHash.ValueString()})
	zip, err := c.open()
	if err != nil {
		diags.AddAttributeError(c.attr(), "Cannot read the code", err.Error())
		return false
	}
	defer zip.Close()
	if err := send(zip); err != nil {
		diags.AddError("Cannot upload the code", err.Error())
		return false
	}
	return true
}
