// Package provider is the sless Terraform provider: functions, triggers, jobs and secrets
// declared in HCL and applied through the sless REST API (sless.dev/sless/gateway/client).
package provider

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"sless.dev/sless/gateway/client"
)

// Environment variables read when the provider block leaves a setting out.
const (
	EnvEndpoint = "SLESS_ENDPOINT"
	EnvToken    = "SLESS_TOKEN"
)

// requestTimeout bounds one API call; waits for builds and jobs poll with their own limits.
const requestTimeout = 5 * time.Minute

var _ provider.Provider = (*slessProvider)(nil)

// New returns the provider factory for providerserver; version is the release.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &slessProvider{version: version} }
}

type slessProvider struct {
	version string
}

type providerModel struct {
	Endpoint types.String `tfsdk:"endpoint"`
	Token    types.String `tfsdk:"token"`
}

// apiClient is what resources get from Configure: the shared client and the tenant
// namespace every object lives in.
type apiClient struct {
	*client.Client
	namespace string
}

func (p *slessProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "sless"
	resp.Version = p.version
}

func (p *slessProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Manages functions, triggers, jobs and secrets on a sless gateway (a cluster install or `sless dev`). " +
			"Objects live in the tenant namespace derived from the token's subject.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Base URL of the sless gateway, e.g. `http://127.0.0.1:8080`. Defaults to the `" + EnvEndpoint + "` environment variable.",
			},
			"token": schema.StringAttribute{
				Optional:            true,
				Sensitive:           true,
				MarkdownDescription: "Bearer token (a JWT) for the API. Defaults to the `" + EnvToken + "` environment variable.",
			},
		},
	}
}

func (p *slessProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	ctx, end := startSpan(ctx, "sless.configure")
	defer end(&resp.Diagnostics)
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfg.Endpoint.IsUnknown() || cfg.Token.IsUnknown() {
		// Known only after another resource is applied; Terraform calls Configure again then.
		return
	}
	endpoint := settingOrEnv(cfg.Endpoint, EnvEndpoint)
	token := settingOrEnv(cfg.Token, EnvToken)
	if endpoint == "" {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Missing sless endpoint",
			"Set endpoint in the provider \"sless\" block or the "+EnvEndpoint+" environment variable to the gateway URL, e.g. http://127.0.0.1:8080 for `sless dev`.")
		return
	}
	c, err := client.New(endpoint, token, &http.Client{Timeout: requestTimeout, Transport: otelhttp.NewTransport(http.DefaultTransport)})
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Invalid sless endpoint", err.Error())
		return
	}
	id, err := c.WhoAmI(ctx)
	if err != nil {
		summary, detail := connectProblem(endpoint, err)
		resp.Diagnostics.AddError(summary, detail)
		return
	}
	if err := c.EnsureNamespace(ctx, id.Namespace); err != nil {
		resp.Diagnostics.AddError("Cannot prepare the tenant namespace",
			"sless at "+endpoint+" did not create namespace "+id.Namespace+" for subject "+id.Subject+": "+err.Error())
		return
	}
	tflog.Debug(ctx, "sless provider configured", map[string]any{"endpoint": endpoint, "namespace": id.Namespace, "subject": id.Subject})
	data := &apiClient{Client: c, namespace: id.Namespace}
	resp.ResourceData = data
	resp.DataSourceData = data
}

func settingOrEnv(v types.String, env string) string {
	if !v.IsNull() && v.ValueString() != "" {
		return v.ValueString()
	}
	return os.Getenv(env)
}

// connectProblem turns the first API call's failure into a diagnostic that says which of the
// two usual mistakes (wrong address, wrong token) it is.
func connectProblem(endpoint string, err error) (summary, detail string) {
	var apiErr *client.Error
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusUnauthorized || apiErr.StatusCode == http.StatusForbidden):
		return "sless refused the token",
			"The gateway at " + endpoint + " answered " + apiErr.Error() + ". Set token (or " + EnvToken + ") to a valid token; `sless dev` prints one at start-up."
	case errors.As(err, &apiErr):
		return "sless API error", "The gateway at " + endpoint + " answered " + apiErr.Error() + " to GET /v1/whoami; is this a sless endpoint?"
	case errors.As(err, &netErr), errors.As(err, &urlErr):
		return "Cannot reach sless",
			"No answer from " + endpoint + ": " + err.Error() + ". Check endpoint (or " + EnvEndpoint + ") and that the gateway (or `sless dev`) is running."
	}
	return "Cannot reach sless", "Calling " + endpoint + ": " + err.Error()
}

func (p *slessProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewFunctionResource, NewTriggerResource, NewJobResource, NewSecretResource}
}

func (p *slessProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewFunctionDataSource, NewRevisionsDataSource}
}

// clientFrom type-asserts the provider data handed to resources and data sources; nil data
// means the provider is not configured yet (validate, or an unknown endpoint).
func clientFrom(data any) (*apiClient, bool) {
	if data == nil {
		return nil, true
	}
	c, ok := data.(*apiClient)
	return c, ok
}

// Address is the provider's source address; HCL declares it as
// `source = "sless.dev/sless/sless"` and the dev_overrides CLI setting names it.
const Address = "sless.dev/sless/sless"

// configured reports whether the provider got its endpoint and token; they can be unknown
// while planning when they come from another resource.
func (c *apiClient) configured(diags *diag.Diagnostics) bool {
	if c == nil {
		diags.AddError("sless provider not configured",
			"The provider's endpoint or token is not known yet (it depends on a resource that is not applied); apply that resource first, e.g. with -target.")
		return false
	}
	return true
}
