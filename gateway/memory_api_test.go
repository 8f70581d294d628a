package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/backend/backendtest"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/test/testkit"
)

// memBackend keeps functions, triggers and jobs in maps: enough for the API's request
// handling and validation, which the gateway does before any backend sees a spec. The rest
// of Backend (routing, logs) is never called here.
type memBackend struct {
	backend.Backend
	functions *memStore[api.Function, api.FunctionSpec]
	triggers  *memStore[api.Trigger, api.TriggerSpec]
	jobs      *memStore[api.Job, api.JobSpec]
	secrets   *memStore[memSecret, api.SecretSpec]
}

// memSecret is a secret with its data, which the Store answers without (secretView).
type memSecret struct {
	api.Secret
	spec api.SecretSpec
}

func newMemBackend() *memBackend {
	return &memBackend{
		functions: newMemStore("function", func(ns, name string, s api.FunctionSpec) api.Function {
			return api.Function{Name: name, Namespace: ns, FunctionSpec: s}
		}, func(f *api.Function) *api.FunctionSpec { return &f.FunctionSpec }),
		triggers: newMemStore("trigger", func(ns, name string, s api.TriggerSpec) api.Trigger {
			return api.Trigger{Name: name, Namespace: ns, TriggerSpec: s}
		}, func(t *api.Trigger) *api.TriggerSpec { return &t.TriggerSpec }),
		jobs: newMemStore("job", func(ns, name string, s api.JobSpec) api.Job {
			return api.Job{Name: name, Namespace: ns, JobSpec: s}
		}, func(j *api.Job) *api.JobSpec { return &j.JobSpec }),
		secrets: newMemStore("secret", func(ns, name string, s api.SecretSpec) memSecret {
			return memSecret{Secret: api.Secret{Name: name, Namespace: ns, Version: 1}, spec: s}
		}, func(m *memSecret) *api.SecretSpec { m.Version++; m.spec = api.SecretSpec{}; return &m.spec }),
	}
}

// secretView answers a memSecret's API view, as the control planes do: keys, no data.
type secretView struct {
	*memStore[memSecret, api.SecretSpec]
}

func (m memSecret) view() api.Secret {
	s := m.Secret
	s.Keys = slices.Sorted(maps.Keys(m.spec.Data))
	return s
}

func (v secretView) List(ctx context.Context, ns string) ([]api.Secret, error) {
	all, err := v.memStore.List(ctx, ns)
	out := make([]api.Secret, len(all))
	for i, m := range all {
		out[i] = m.view()
	}
	return out, err
}

func (v secretView) Get(ctx context.Context, ns, name string) (api.Secret, error) {
	m, err := v.memStore.Get(ctx, ns, name)
	return m.view(), err
}

func (v secretView) Create(ctx context.Context, ns, name string, spec api.SecretSpec) (api.Secret, error) {
	m, err := v.memStore.Create(ctx, ns, name, spec)
	return m.view(), err
}

func (v secretView) Update(ctx context.Context, ns, name string, mutate func(*api.SecretSpec) error) (api.Secret, error) {
	m, err := v.memStore.Update(ctx, ns, name, mutate)
	return m.view(), err
}

func (b *memBackend) EnsureNamespace(context.Context, string) error { return nil }

func (b *memBackend) Functions() backend.Store[api.Function, api.FunctionSpec] { return b.functions }
func (b *memBackend) Triggers() backend.Store[api.Trigger, api.TriggerSpec]    { return b.triggers }
func (b *memBackend) Jobs() backend.Store[api.Job, api.JobSpec]                { return b.jobs }
func (b *memBackend) Secrets() backend.Store[api.Secret, api.SecretSpec] {
	return secretView{b.secrets}
}

// Transport is asked for when the server is built; no call here reaches a function.
func (b *memBackend) Transport() http.RoundTripper { return http.DefaultTransport }

// memStore is one kind's objects, keyed by namespace/name.
type memStore[O, S any] struct {
	mu   sync.Mutex
	kind string
	m    map[string]O
	make func(ns, name string, spec S) O
	spec func(*O) *S
}

func newMemStore[O, S any](kind string, mk func(ns, name string, spec S) O, spec func(*O) *S) *memStore[O, S] {
	return &memStore[O, S]{kind: kind, m: map[string]O{}, make: mk, spec: spec}
}

func (s *memStore[O, S]) List(_ context.Context, ns string) ([]O, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []O
	for k, v := range s.m {
		if strings.HasPrefix(k, ns+"/") {
			out = append(out, v)
		}
	}
	return out, nil
}

func (s *memStore[O, S]) Get(_ context.Context, ns, name string) (O, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[ns+"/"+name]
	if !ok {
		return v, &backend.NotFoundError{Kind: s.kind, Namespace: ns, Name: name}
	}
	return v, nil
}

func (s *memStore[O, S]) Create(_ context.Context, ns, name string, spec S) (O, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.make(ns, name, spec)
	if _, ok := s.m[ns+"/"+name]; ok {
		return v, &backend.ConflictError{Kind: s.kind, Namespace: ns, Name: name, Reason: "already exists"}
	}
	s.m[ns+"/"+name] = v
	return v, nil
}

func (s *memStore[O, S]) Update(ctx context.Context, ns, name string, mutate func(*S) error) (O, error) {
	v, err := s.Get(ctx, ns, name)
	if err != nil {
		return v, err
	}
	if err := mutate(s.spec(&v)); err != nil {
		return v, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[ns+"/"+name] = v
	return v, nil
}

func (s *memStore[O, S]) Delete(ctx context.Context, ns, name string) error {
	if _, err := s.Get(ctx, ns, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, ns+"/"+name)
	return nil
}

var memKey = []byte("memory-api-test-hmac-key-0123456789abcdef")

// memServer is the gateway over a memBackend, served on loopback.
type memServer struct {
	t      *testing.T
	URL    string
	server *gateway.Server
}

func newMemServer(t *testing.T) *memServer {
	t.Helper()
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: memKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: newMemBackend(), Auth: auth, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &memServer{t: t, URL: hs.URL, server: srv}
}

// do sends method path (under /v1/namespaces/ns) with body and token, and returns the status,
// the decoded error body, if any, and the headers.
func (m *memServer) do(token, ns, method, path, body string) (int, api.Error, http.Header) {
	m.t.Helper()
	req, err := http.NewRequest(method, m.URL+"/v1/namespaces/"+ns+path, strings.NewReader(body))
	if err != nil {
		m.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e, resp.Header
}

// TestValidationErrors: every malformed or out-of-range request is a 400 naming the API
// field (a 404 for an update of nothing), before any backend sees the spec. The cluster
// backend's own rejections (the CRD's schema and CEL rules) are gateway/cluster's
// TestBackendMapsAPIServerErrors.
func TestValidationErrors(t *testing.T) {
	m := newMemServer(t)
	const sub = "validation-tester"
	tok, ns := testkit.Token(t, memKey, sub), api.TenantNamespace(sub)
	do := func(method, path, body string) (int, api.Error) {
		t.Helper()
		code, e, _ := m.do(tok, ns, method, path, body)
		return code, e
	}
	if code, e := do("POST", "/functions", `{"name":"f","runtime":"go1.23"}`); code != http.StatusCreated {
		t.Fatalf("create f: %d %+v", code, e)
	}
	cases := []struct {
		name, method, path, body string
		code                     int
		field                    string
	}{
		{"bad name", "POST", "/functions", `{"name":"Bad_Name","runtime":"go1.23"}`, 400, "name"},
		{"long name", "POST", "/functions", `{"name":"` + strings.Repeat("a", 64) + `","runtime":"go1.23"}`, 400, "name"},
		{"missing runtime", "POST", "/functions", `{"name":"x"}`, 400, "runtime"},
		{"unknown runtime", "POST", "/functions", `{"name":"x","runtime":"cobol"}`, 400, "runtime"},
		{"timeout too long", "POST", "/functions", `{"name":"x","runtime":"go1.23","timeout_sec":901}`, 400, "timeout_sec"},
		{"negative timeout", "POST", "/functions", `{"name":"x","runtime":"go1.23","timeout_sec":-1}`, 400, "timeout_sec"},
		{"unknown field", "POST", "/functions", `{"name":"x","runtime":"go1.23","memory":5}`, 400, "memory"},
		{"wrong type", "POST", "/functions", `{"name":"x","runtime":"go1.23","memory_mb":"big"}`, 400, "memory_mb"},
		{"malformed JSON", "POST", "/functions", `{"name":`, 400, ""},
		{"trailing data", "POST", "/functions", `{"name":"x","runtime":"go1.23"} {}`, 400, ""},
		{"empty body", "POST", "/functions", ``, 400, ""},
		{"Go entrypoint not exported", "POST", "/functions", `{"name":"x","runtime":"go1.23","entrypoint":"handler.handle"}`, 400, "entrypoint"},
		{"Python entrypoint without module", "POST", "/functions", `{"name":"x","runtime":"python3.11","entrypoint":"handle"}`, 400, "entrypoint"},
		{"reserved env", "POST", "/functions", `{"name":"x","runtime":"go1.23","env_vars":{"SLESS_MODE":"x"}}`, 400, "env_vars.SLESS_MODE"},
		{"NUL in env", "POST", "/functions", `{"name":"x","runtime":"go1.23","env_vars":{"A":"b\u0000c"}}`, 400, "env_vars.A"},
		{"env value too large", "POST", "/functions", `{"name":"x","runtime":"go1.23","env_vars":{"A":"` + strings.Repeat("v", 32<<10+1) + `"}}`, 400, "env_vars.A"},
		{"env too large in all", "PUT", "/functions/f", `{"env_vars":{` + manyVars(5, 30<<10) + `}}`, 400, "env_vars"},
		{"job env NUL", "POST", "/jobs", `{"name":"j","function":"f","env_vars":{"A":"\u0000"}}`, 400, "env_vars.A"},
		{"max below min", "PUT", "/functions/f", `{"min_replicas":5,"max_replicas":2}`, 400, "max_replicas"},
		{"update bad timeout", "PUT", "/functions/f", `{"timeout_sec":1000}`, 400, "timeout_sec"},
		{"stream idle bound zero", "PUT", "/functions/f", `{"stream_idle_timeout_sec":0}`, 400, "stream_idle_timeout_sec"},
		{"stream idle bound above an hour", "POST", "/functions", `{"name":"x","runtime":"go1.23","stream_idle_timeout_sec":3601}`, 400, "stream_idle_timeout_sec"},
		{"h2c from uploaded code", "PUT", "/functions/f", `{"protocol":"h2c"}`, 400, "protocol"},
		{"unknown protocol", "POST", "/functions", `{"name":"x","runtime":"go1.23","image":"reg.example/app:1","protocol":"h3"}`, 400, "protocol"},
		{"update missing", "PUT", "/functions/nope", `{"memory_mb":64}`, 404, ""},
		{"bad path name", "GET", "/functions/UPPER", ``, 400, "name"},
		{"bad schedule", "POST", "/triggers", `{"name":"c","type":"cron","function":"f","schedule":"61 * * * *"}`, 400, "schedule"},
		{"six fields", "POST", "/triggers", `{"name":"c","type":"cron","function":"f","schedule":"0 0 * * * *"}`, 400, "schedule"},
		{"bad timezone", "POST", "/triggers", `{"name":"c","type":"cron","function":"f","schedule":"@daily","timezone":"Mars/Olympus"}`, 400, "timezone"},
		{"prewarm too long", "POST", "/triggers", `{"name":"c","type":"cron","function":"f","schedule":"@daily","prewarm_seconds":3601}`, 400, "prewarm_seconds"},
		{"negative prewarm", "POST", "/triggers", `{"name":"c","type":"cron","function":"f","schedule":"@daily","prewarm_seconds":-5}`, 400, "prewarm_seconds"},
		{"prewarm on event", "POST", "/triggers", `{"name":"c","type":"event","function":"f","queue":"q","broker_secret":"amqp","prewarm_seconds":5}`, 400, "prewarm_seconds"},
		{"async attempts zero", "PUT", "/functions/f", `{"async":{"enabled":true,"max_attempts":0}}`, 400, "async.max_attempts"},
		{"async backoff too long", "PUT", "/functions/f", `{"async":{"backoff_ms":3600001}}`, 400, "async.backoff_ms"},
		{"async unknown field", "PUT", "/functions/f", `{"async":{"retries":3}}`, 400, "retries"},
		{"async dead-letter queue too long", "PUT", "/functions/f", `{"async":{"dead_letter_queue":"` + strings.Repeat("q", 256) + `"}}`, 400, "async.dead_letter_queue"},
		// Issue 24, attack 4: queue names of another tenant (or none's) on a shared broker.
		{"async dead-letter queue of another tenant", "PUT", "/functions/f", `{"async":{"dead_letter_queue":"sless-0123456789abcdef.async.f"}}`, 400, "async.dead_letter_queue"},
		{"async dead-letter queue outside the tenant", "PUT", "/functions/f", `{"async":{"dead_letter_queue":"` + ns + `x.dlq"}}`, 400, "async.dead_letter_queue"},
		{"event queue of another tenant", "POST", "/triggers", `{"name":"c","type":"event","function":"f","queue":"sless-0123456789abcdef.orders","broker_secret":"amqp"}`, 400, "queue"},
		{"event dead-letter queue of another tenant", "POST", "/triggers", `{"name":"c","type":"event","function":"f","queue":"` + ns + `.orders","broker_secret":"amqp","dead_letter_queue":"shared.dlq"}`, 400, "dead_letter_queue"},
		{"schedule on http", "POST", "/triggers", `{"name":"c","type":"http","function":"f","schedule":"@daily"}`, 400, "schedule"},
		{"event without queue", "POST", "/triggers", `{"name":"c","type":"event","function":"f","broker_secret":"amqp"}`, 400, "queue"},
		{"unknown type", "POST", "/triggers", `{"name":"c","type":"sms","function":"f"}`, 400, "type"},
		{"job with both", "POST", "/jobs", `{"name":"j","function":"f","runtime":"go1.23"}`, 400, "runtime"},
		{"job with neither", "POST", "/jobs", `{"name":"j"}`, 400, "function"},
		{"job negative run", "POST", "/jobs", `{"name":"j","function":"f","run_id":-1}`, 400, "run_id"},
		{"job event not JSON", "POST", "/jobs", `{"name":"j","function":"f","event":}`, 400, ""},
		{"traffic not summing to 100", "PUT", "/functions/f", `{"traffic":[{"latest":true,"percent":90}]}`, 400, "traffic"},
		{"traffic empty", "PUT", "/functions/f", `{"traffic":[]}`, 400, "traffic"},
		{"traffic of another function", "PUT", "/functions/f", `{"traffic":[{"revision":"g-1","percent":100}]}`, 400, "traffic[0].revision"},
		{"traffic revision and latest", "PUT", "/functions/f", `{"traffic":[{"revision":"f-1","latest":true,"percent":100}]}`, 400, "traffic[0].revision"},
		{"traffic duplicate tag", "PUT", "/functions/f", `{"traffic":[{"latest":true,"percent":50,"tag":"a"},{"revision":"f-1","percent":50,"tag":"a"}]}`, 400, "traffic[1].tag"},
		{"traffic bad tag", "POST", "/functions", `{"name":"x","runtime":"go1.23","traffic":[{"latest":true,"percent":100,"tag":"Canary"}]}`, 400, "traffic[0].tag"},
		{"traffic percent out of range", "PUT", "/functions/f", `{"traffic":[{"latest":true,"percent":101},{"revision":"f-1","percent":-1}]}`, 400, "traffic[0].percent"},
		{"revision history limit zero", "PUT", "/functions/f", `{"revision_history_limit":0}`, 400, "revision_history_limit"},
		{"rollout not ending at 100", "PUT", "/functions/f", `{"rollout":{"steps":[10,50],"interval_sec":60,"max_error_rate":0.05,"min_requests":20}}`, 400, "rollout.steps"},
		{"rollout rate above 1", "PUT", "/functions/f", `{"rollout":{"steps":[100],"interval_sec":60,"max_error_rate":5,"min_requests":20}}`, 400, "rollout.max_error_rate"},
		{"rollout unknown field", "PUT", "/functions/f", `{"rollout":{"steps":[100],"every":60}}`, 400, "every"},
		{"revision history limit too high", "PUT", "/functions/f", `{"revision_history_limit":101}`, 400, "revision_history_limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, e := do(tc.method, tc.path, tc.body)
			if code != tc.code || e.Field != tc.field || e.Error == "" {
				t.Fatalf("%s %s %s = %d %+v, want %d with field %q", tc.method, tc.path, tc.body, code, e, tc.code, tc.field)
			}
		})
	}
}

// manyVars renders n JSON members V0..Vn-1 with values of size bytes.
func manyVars(n, size int) string {
	vars := make([]string, n)
	for i := range vars {
		vars[i] = fmt.Sprintf(`"V%d":"%s"`, i, strings.Repeat("v", size))
	}
	return strings.Join(vars, ",")
}

// TestAuthAndTenancy: a tenant reaches its own namespace only, with a token the gateway
// verifies; a 401 says how to authenticate.
func TestAuthAndTenancy(t *testing.T) {
	m := newMemServer(t)
	alice, bob := "alice-"+t.Name(), "bob-"+t.Name()
	aliceTok, aliceNS := testkit.Token(t, memKey, alice), api.TenantNamespace(alice)
	cases := []struct {
		name, token string
		code        int
	}{
		{"own namespace", aliceTok, 200},
		{"no token", "", 401},
		{"garbage token", "not-a-jwt", 401},
		{"other tenant", testkit.Token(t, memKey, bob), 403},
		{"signed with another key", testkit.Token(t, []byte("some-other-key-0123456789abcdef0123456789"), alice), 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, hdr := m.do(tc.token, aliceNS, "GET", "/functions", "")
			if code != tc.code {
				t.Fatalf("status %d, want %d", code, tc.code)
			}
			if code == 401 && hdr.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
	c, err := client.New(m.URL, aliceTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.WhoAmI(context.Background())
	if err != nil || id.Namespace != aliceNS || id.Subject != alice {
		t.Fatalf("whoami = %+v, %v", id, err)
	}
}

// TestTriggerSources: every answer of the trigger routes carries its kind's status.source,
// which the API fills in for both planes (the table their tests run).
func TestTriggerSources(t *testing.T) {
	m := newMemServer(t)
	const sub = "source-tester"
	c, err := client.New(m.URL, testkit.Token(t, memKey, sub), nil)
	if err != nil {
		t.Fatal(err)
	}
	backendtest.RunTriggerSources(t, c, api.TenantNamespace(sub), "f")
}

// TestOpenAPIServed: /v1/openapi.yaml parses and documents every /v1 route the server has.
func TestOpenAPIServed(t *testing.T) {
	m := newMemServer(t)
	_, body := testkit.Get(t, m.URL+"/v1/openapi.yaml", "", nil)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(body, &doc); err != nil {
		t.Fatalf("openapi.yaml does not parse: %v", err)
	}
	for _, r := range m.server.Routes() {
		if r.Method == "echo_route_not_found" || (!strings.HasPrefix(r.Path, "/v1/namespaces") && r.Path != "/v1/whoami") {
			continue
		}
		path := strings.NewReplacer(":ns", "{ns}", ":name", "{name}", ":id", "{id}", ":rev", "{rev}").Replace(r.Path)
		if _, ok := doc.Paths[path][strings.ToLower(r.Method)]; !ok {
			t.Errorf("openapi.yaml does not document %s %s", r.Method, path)
		}
	}
}
