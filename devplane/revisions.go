package devplane

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
)

// Revisions in sless dev: a function's record keeps its revisions in its status (the
// configuration each runs, never changed once made, and its phase). Every revision that
// serves (traffic or a tag) and the latest created one is its own pool entry under
// rules.RevisionHost; /fn/ picks one per call (gateway), and calls to the function's host
// (triggers, asynchronous calls, jobs' wake-ups) are picked the same way by revisionRouter.

// functionStatus is a function's status as sless dev keeps it: the API's, its revisions
// oldest first, and the last revision number given (numbers are never reused).
type functionStatus struct {
	api.FunctionStatus
	Revisions    []api.Revision `json:"revisions,omitempty"`
	LastRevision int64          `json:"last_revision,omitempty"`
}

// A function's state file keeps each revision's env as the changes from the revision before
// it (the oldest kept one in full), so a variable is written once however many revisions
// keep it: a function's file holds its spec, the oldest revision's env and what each change
// changed, not one copy of a large env per revision. In memory every revision has its whole
// env (an unchanged value shares the previous revision's string), so a revision still runs,
// rolls back to and shows exactly the env it was made with. A file written before this
// encoding (every revision's env in full) loads as it is.

// storedRevision is a revision as its function's state file keeps it: with EnvChanges set,
// Config.EnvVars is left out and is the previous revision's env with these changes.
type storedRevision struct {
	api.Revision
	EnvChanges *envChanges `json:"env_changes,omitempty"`
}

// envChanges turn one env into the next: variables set (new or changed) and removed.
type envChanges struct {
	Set   map[string]string `json:"set,omitempty"`
	Unset []string          `json:"unset,omitempty"`
}

// storedStatus is functionStatus's wire form in the state file.
type storedStatus struct {
	plainStatus
	Revisions []storedRevision `json:"revisions,omitempty"`
}

// plainStatus is functionStatus without its JSON methods.
type plainStatus functionStatus

func (s functionStatus) MarshalJSON() ([]byte, error) {
	out := storedStatus{plainStatus: plainStatus(s), Revisions: make([]storedRevision, len(s.Revisions))}
	for i, rev := range s.Revisions {
		out.Revisions[i].Revision = rev
		if i == 0 {
			continue
		}
		prev, cur := s.Revisions[i-1].Config.EnvVars, rev.Config.EnvVars
		ch := &envChanges{}
		for k, v := range cur {
			if old, ok := prev[k]; !ok || old != v {
				if ch.Set == nil {
					ch.Set = map[string]string{}
				}
				ch.Set[k] = v
			}
		}
		for k := range prev {
			if _, ok := cur[k]; !ok {
				ch.Unset = append(ch.Unset, k)
			}
		}
		slices.Sort(ch.Unset)
		out.Revisions[i].Config.EnvVars, out.Revisions[i].EnvChanges = nil, ch
	}
	return json.Marshal(out)
}

func (s *functionStatus) UnmarshalJSON(data []byte) error {
	var in storedStatus
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*s = functionStatus(in.plainStatus)
	s.Revisions = nil
	for _, r := range in.Revisions {
		rev := r.Revision
		if ch := r.EnvChanges; ch != nil {
			var env map[string]string
			if n := len(s.Revisions); n > 0 {
				env = maps.Clone(s.Revisions[n-1].Config.EnvVars)
			}
			if env == nil && len(ch.Set) > 0 {
				env = map[string]string{}
			}
			maps.Copy(env, ch.Set)
			for _, k := range ch.Unset {
				delete(env, k)
			}
			rev.Config.EnvVars = env
		}
		s.Revisions = append(s.Revisions, rev)
	}
	return nil
}

// idleGrace is how long a revision that lost its traffic stays in the pool, so the calls
// already routed to it are answered.
const idleGrace = 5 * time.Second

// running is a revision in the pool.
type running struct {
	spec   pool.Spec
	values [][]byte // its secret values, masked in what the function prints and answers
	// idleSince is when it stopped serving (zero while it serves).
	idleSince time.Time
}

// maskRetired is how long the values a revision ran with stay masked once a rotation
// replaced them or the revision left the pool: past the pool's drain of the processes that
// had them (StopGrace, 5 s by default, then their last output), whose answers may still be
// recorded.
const maskRetired = 30 * time.Second

// retiredValues are secret values no revision in the pool runs with any more, masked until.
type retiredValues struct {
	values [][]byte
	until  time.Time
}

// newRevision gives r a new revision when what it runs changed (and it has source to run),
// and reports whether it did. It runs in the write that changes the spec, so every such
// change makes its own revision, however soon the next one follows.
func newRevision(r *functionRecord) bool {
	if r.Spec.Source == nil || r.Spec.Image != "" {
		return false
	}
	cfg := api.RevisionConfigOf(r.Spec)
	if n := len(r.Status.Revisions); n > 0 {
		prev := r.Status.Revisions[n-1].Config
		if api.SameRevisionConfig(prev, cfg) {
			return false
		}
		for k, v := range cfg.EnvVars {
			if old, ok := prev.EnvVars[k]; ok && old == v {
				cfg.EnvVars[k] = old // one copy of an unchanged value in memory
			}
		}
	}
	r.Status.LastRevision++
	rev := api.Revision{Name: rules.RevisionName(r.Name, r.Status.LastRevision), Namespace: r.Namespace, Function: r.Name,
		Number: r.Status.LastRevision, CreatedAt: time.Now().UTC().Truncate(time.Second), Config: cfg,
		Status: api.RevisionStatus{Phase: api.RevisionBuilding}}
	r.Status.Revisions = append(slices.Clone(r.Status.Revisions), rev)
	r.Status.LatestCreatedRevision = rev.Name
	return true
}

// currentRevision is the revision of the function's current configuration (made here for a
// function stored before revisions).
func (b *Backend) currentRevision(key string) (api.Revision, error) {
	err := setStatus(b, functions, key, newRevision)
	r, ok := b.store.snapshot().functions[key]
	if err != nil || !ok || len(r.Status.Revisions) == 0 {
		return api.Revision{}, errors.Join(err, fmt.Errorf("function %s has no revision", key))
	}
	return r.Status.Revisions[len(r.Status.Revisions)-1], nil
}

// settleRevision sets a revision's status from the outcome of its build and start
// (rules.SettleRevision; a revision's configuration is never changed). sless dev builds and
// starts a function's latest revision again whenever it starts, so each outcome settles the
// revision anew: one that could not start may start later.
func (b *Backend) settleRevision(key, name string, build rules.Build) error {
	st := rules.SettleRevision(api.RevisionStatus{}, true, build, nil)
	return setStatus(b, functions, key, func(r *functionRecord) bool {
		i := slices.IndexFunc(r.Status.Revisions, func(rev api.Revision) bool { return rev.Name == name })
		if i < 0 || r.Status.Revisions[i].Status == st {
			return false
		}
		r.Status.Revisions = slices.Clone(r.Status.Revisions)
		r.Status.Revisions[i].Status = st
		return true
	})
}

// revisionSpec is how a revision runs in the pool: its own configuration, the function's
// current scaling settings (they are not part of a revision).
func revisionSpec(fn api.FunctionSpec, c api.RevisionConfig, art *buildkit.Artifact, disabled bool, secretEnv map[string]string, files map[string]map[string][]byte) pool.Spec {
	env := c.EnvVars
	if len(secretEnv) > 0 {
		env = maps.Clone(c.EnvVars)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, secretEnv)
	}
	spec := pool.Spec{
		Artifact: art, Env: env, Files: files, Timeout: time.Duration(c.TimeoutSec) * time.Second,
		MinProcs: int(fn.MinReplicas), MaxProcs: int(fn.MaxReplicas), Target: int(fn.ScalingTarget),
		ScaleDown: time.Duration(fn.ScaleDownPeriodSec) * time.Second, Disabled: disabled, MemoryMB: int(c.MemoryMB),
	}
	return spec
}

// startRevision puts a built revision into the pool (or updates its entry when its secrets'
// values or the function's scaling changed).
func (b *Backend) startRevision(key string, fn api.Function, rev api.Revision, art *buildkit.Artifact, disabled bool) error {
	env, files, err := b.secretInputs(fn.Namespace, api.FunctionSpec{SecretEnv: rev.Config.SecretEnv, SecretFiles: rev.Config.SecretFiles})
	if err != nil {
		return err
	}
	// Its key, with which the gateway and the trigger runners sign its calls, is masked in
	// what it prints as its secrets' values are.
	if env == nil {
		env = map[string]string{}
	}
	env[rules.EnvIdentityKey] = hex.EncodeToString(b.functionKey(fn.Namespace, fn.Name))
	spec := revisionSpec(fn.FunctionSpec, rev.Config, art, disabled, env, files)
	spec.Group = key // its revisions share a user and a task limit
	b.depMu.Lock()
	cur, ok := b.deployed[key].revisions[rev.Name]
	b.depMu.Unlock()
	if ok && equalSpec(cur.spec, spec) {
		b.setRunning(key, rev.Name, &cur)
		return nil
	}
	var values [][]byte
	for _, v := range env {
		values = append(values, []byte(v))
	}
	for _, dir := range files {
		for _, v := range dir {
			values = append(values, v)
		}
	}
	spec.Mask = rules.NewSecretMasker(values)
	if err := b.pool.Set(rules.RevisionHost(fn.Namespace, rev.Name, b.opts.Domain), spec); err != nil {
		return fmt.Errorf("starting revision %s of function %s: %w", rev.Name, key, err)
	}
	b.setRunning(key, rev.Name, &running{spec: spec, values: values})
	return nil
}

// equalSpec compares two pool specs by what the pool runs.
func equalSpec(a, b pool.Spec) bool {
	return a.Artifact == b.Artifact && maps.Equal(a.Env, b.Env) && equalJSON(a.Files, b.Files) && a.Timeout == b.Timeout &&
		a.MinProcs == b.MinProcs && a.MaxProcs == b.MaxProcs && a.Target == b.Target && a.ScaleDown == b.ScaleDown &&
		a.Disabled == b.Disabled && a.MemoryMB == b.MemoryMB
}

// setRunning records a revision in the pool as serving (nil: removed).
func (b *Backend) setRunning(key, rev string, r *running) {
	b.depMu.Lock()
	defer b.depMu.Unlock()
	d := b.deployed[key]
	d.revisions = maps.Clone(d.revisions)
	if d.revisions == nil {
		d.revisions = map[string]running{}
	}
	old, had := d.revisions[rev]
	if r == nil {
		delete(d.revisions, rev)
	} else {
		r.idleSince = time.Time{}
		d.revisions[rev] = *r
	}
	if had && (r == nil || !slices.EqualFunc(old.values, r.values, bytes.Equal)) {
		d = retire(d, old.values)
	}
	b.deployed[key] = b.withMask(key, d)
}

// retire keeps values masked for maskRetired: a rotation replaced them or their revision
// left the pool, and processes that had them may still print or answer.
func retire(d deployment, values [][]byte) deployment {
	if len(values) > 0 {
		d.retired = append(slices.Clone(d.retired), retiredValues{values: values, until: time.Now().Add(maskRetired)})
	}
	return d
}

// withMask completes d after its revisions changed: the host triggers call while one runs
// and the masker of every running revision's secret values and of those retired lately.
func (b *Backend) withMask(key string, d deployment) deployment {
	d.host = ""
	if len(d.revisions) > 0 {
		d.host = b.routingHost(splitKey(key))
	}
	var values [][]byte
	for _, r := range d.revisions {
		values = append(values, r.values...)
	}
	now := time.Now()
	d.retired = slices.DeleteFunc(slices.Clone(d.retired), func(r retiredValues) bool { return now.After(r.until) })
	for _, r := range d.retired {
		values = append(values, r.values...)
	}
	d.mask = rules.NewSecretMasker(values)
	return d
}

// settleRevisions runs what the function's traffic needs: every serving revision and the
// latest ready one are started (their builds are found by content hash), the others leave
// the pool idleGrace after they stopped serving; revisions beyond revision_history_limit
// are deleted; the status shows the resolved traffic. An error means "retry later".
func (b *Backend) settleRevisions(ctx context.Context, key string, disabled bool) error {
	r, ok := b.store.snapshot().functions[key]
	if !ok {
		return nil
	}
	fn := functionOf(r)
	states := rules.StatesOf(r.Status.Revisions)
	latestReady := rules.LatestReady(states)
	rollout := b.rolloutOf(ctx, r, latestReady)
	resolved := rules.DesiredTraffic(r.Spec.Traffic, latestReady, rollout)
	need := map[string]bool{latestReady: latestReady != ""}
	var errs []error
	for _, rev := range r.Status.Revisions {
		if rev.Status.Phase != api.RevisionReady || !(need[rev.Name] || rules.Serving(resolved, rev.Name)) {
			continue
		}
		need[rev.Name] = true
		art, _, err := b.artifact(ctx, fn.Namespace, rev.Config.Runtime, rev.Config.Source, logKey(backend.LogBuild, fn.Namespace, fn.Name), func() {})
		if err == nil {
			err = b.startRevision(key, fn, rev, art, disabled)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("revision %s: %w", rev.Name, err))
		}
	}
	b.retireIdle(key, need)
	gone := rules.RevisionsToDelete(states, resolved, int(r.Spec.RevisionHistoryLimit))
	err := setStatus(b, functions, key, func(r *functionRecord) bool {
		r.Status.Revisions = slices.DeleteFunc(slices.Clone(r.Status.Revisions), func(rev api.Revision) bool { return slices.Contains(gone, rev.Name) })
		r.Status.LatestReadyRevision, r.Status.Traffic, r.Status.Rollout = latestReady, resolved, rollout
		if n := len(r.Status.Revisions); n > 0 {
			r.Status.LatestCreatedRevision = r.Status.Revisions[n-1].Name
		}
		return true
	})
	b.rebuildRoutes()
	return errors.Join(append(errs, err)...)
}

// rolloutCheck is how often a rollout in progress is judged.
const rolloutCheck = time.Second

// rolloutOf is where the function's rollout stands now (rules.NextRollout), judged by its
// calls in the invocation history; one in progress is checked again in rolloutCheck.
func (b *Backend) rolloutOf(ctx context.Context, r *functionRecord, latestReady string) *rules.RolloutState {
	key := objectKey(r.Namespace, r.Name)
	st, rolledBack := rules.NextRollout(r.Spec.Rollout, r.Status.Rollout, latestReady, r.Status.LatestReadyRevision, time.Now(),
		history.RolloutJudge(ctx, b.opts.History, r.Namespace, r.Name, "sless dev was started without an invocation history to judge the rollout by"))
	if rolledBack {
		b.log.Warn("Warning: rollout rolled back", "function", key, "revision", st.Revision, "reason", st.Message)
	}
	if st != nil && st.Phase == rules.RolloutProgressing {
		b.queue.AddAfter("function/"+key, rolloutCheck)
	}
	return st
}

// retireIdle takes revisions that do not serve out of the pool once idle for idleGrace.
func (b *Backend) retireIdle(key string, need map[string]bool) {
	ns, _ := splitKey(key)
	now := time.Now()
	var remove []string
	b.depMu.Lock()
	d := b.deployed[key]
	d.revisions = maps.Clone(d.revisions)
	for name, run := range d.revisions {
		switch {
		case need[name]:
		case run.idleSince.IsZero():
			run.idleSince = now
			d.revisions[name] = run
			b.queue.AddAfter("function/"+key, idleGrace)
		case now.Sub(run.idleSince) >= idleGrace:
			delete(d.revisions, name)
			d = retire(d, run.values)
			remove = append(remove, name)
		default:
			b.queue.AddAfter("function/"+key, idleGrace-now.Sub(run.idleSince))
		}
	}
	if d.revisions != nil {
		b.deployed[key] = b.withMask(key, d)
	}
	b.depMu.Unlock()
	for _, name := range remove {
		b.pool.Remove(rules.RevisionHost(ns, name, b.opts.Domain))
	}
}

// Revisions lists a function's revisions with their share of its traffic.
func (b *Backend) Revisions(_ context.Context, ns, function string) ([]api.Revision, error) {
	r, ok := b.store.snapshot().functions[objectKey(ns, function)]
	if !ok {
		return nil, notFound("function", ns, function)
	}
	out := slices.Clone(r.Status.Revisions)
	for i := range out {
		out[i].Percent, out[i].Tags = rules.Shares(r.Status.Traffic, out[i].Name)
		if out[i].Tags == nil {
			out[i].Tags = []string{}
		}
	}
	return out, nil
}

// checkTraffic refuses traffic naming a revision the function does not have or one that
// failed.
func checkTraffic(revs []api.Revision, spec api.FunctionSpec) error {
	if err := rules.CheckTrafficRevisions(spec.Traffic, rules.StatesOf(revs)); err != nil {
		return &backend.InvalidError{Field: err.Field, Reason: err.Reason}
	}
	return nil
}

// targetsOf is a function's /fn/ targets: its resolved traffic, each with the pool host of
// its revision while that runs.
func (b *Backend) targetsOf(r *functionRecord, d deployment) []backend.RouteTarget {
	resolved := r.Status.Traffic
	if len(resolved) == 0 {
		resolved = rules.DesiredTraffic(r.Spec.Traffic, r.Status.LatestReadyRevision, nil)
	}
	out := make([]backend.RouteTarget, len(resolved))
	for i, t := range resolved {
		out[i].ResolvedTarget = t
		if _, ok := d.revisions[t.Revision]; ok && t.Revision != "" {
			out[i].Host = rules.RevisionHost(r.Namespace, t.Revision, b.opts.Domain)
		}
	}
	return out
}

// revisionRouter is the transport of calls from inside sless dev (triggers, asynchronous
// calls, the gateway's /fn/): a call for a function's host goes to one of its revisions by
// its traffic's weights, one for a revision's host straight to the pool. Every answer names
// the revision in X-Sless-Revision.
type revisionRouter struct{ b *Backend }

func (t revisionRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	// A revision's host (every /fn/ call: the gateway picked and names the revision itself)
	// goes to the pool without parsing.
	if strings.HasSuffix(strings.TrimSuffix(host, t.b.opts.Domain), "."+rules.RevisionHostLabel+".") {
		return t.b.pool.RoundTrip(req)
	}
	key, rev, ok := t.b.keyOfHost(host)
	if ok {
		route, err := t.b.Route(splitKey(key))
		if err != nil {
			closeBody(req)
			return nil, err
		}
		i := rules.PickTarget(route.Targets, func(t *backend.RouteTarget) int32 { return t.Percent }, "")
		if i < 0 || route.Targets[i].Host == "" {
			closeBody(req)
			return nil, fmt.Errorf("%w: function %s has no revision serving", pool.ErrUnknown, key)
		}
		out := req.Clone(req.Context())
		out.Host, out.URL.Host = route.Targets[i].Host, route.Targets[i].Host
		req, rev = out, route.Targets[i].Revision
	}
	resp, err := t.b.pool.RoundTrip(req)
	if err == nil && rev != "" {
		resp.Header.Set(rules.HeaderRevision, rev)
	}
	return resp, err
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// keyOfHost is the function key a routing host (<name>.<ns>.<domain>) or a revision's pool
// host (rules.RevisionHost) names, with the revision for the latter.
func (b *Backend) keyOfHost(host string) (key, revision string, ok bool) {
	labels, ok := strings.CutSuffix(host, "."+b.opts.Domain)
	if !ok {
		return "", "", false
	}
	parts := strings.Split(labels, ".")
	switch {
	case len(parts) == 2:
		return objectKey(parts[1], parts[0]), "", true
	case len(parts) == 3 && parts[2] == rules.RevisionHostLabel:
		fn, _, ok := rules.RevisionOf(parts[0])
		return objectKey(parts[1], fn), parts[0], ok
	}
	return "", "", false
}

// Stats sums the processes of every running revision of a function (tests and benchmarks).
func (b *Backend) Stats(ns, name string) pool.Stats {
	d, _ := b.deployment(objectKey(ns, name))
	var s pool.Stats
	for rev := range d.revisions {
		r := b.pool.Stats(rules.RevisionHost(ns, rev, b.opts.Domain))
		s.Processes, s.Ready, s.InFlight = s.Processes+r.Processes, s.Ready+r.Ready, s.InFlight+r.InFlight
		s.PIDs, s.Addrs = append(s.PIDs, r.PIDs...), append(s.Addrs, r.Addrs...)
	}
	return s
}
