package scaling

import (
	"maps"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// RevisionConfigOf is what a revision of code c runs (api.RevisionConfig), the one snapshot
// both planes compare and show: every field of the CRD's CodeSpec is in it, and every other
// field of a FunctionSpec is the function's, applying to all its revisions
// (TestRevisionSnapshot).
func RevisionConfigOf(c *v1.CodeSpec) api.RevisionConfig {
	out := api.RevisionConfig{Runtime: string(c.Runtime), Entrypoint: c.Entrypoint, EnvVars: maps.Clone(c.Env), MemoryMB: c.MemoryMB,
		TimeoutSec: c.TimeoutSeconds, Image: c.Image, Protocol: string(c.Protocol)}
	if s := c.Source; s != nil {
		out.Source = &api.Source{ContextKey: s.ContextKey, ArchiveKey: s.ArchiveKey, SHA256: s.SHA256}
	}
	for _, e := range c.SecretEnv {
		out.SecretEnv = append(out.SecretEnv, api.SecretEnv{Name: e.Name, Secret: e.Secret, Key: e.Key})
	}
	for _, f := range c.SecretFiles {
		out.SecretFiles = append(out.SecretFiles, api.SecretFile{Secret: f.Secret, Path: f.Path})
	}
	return out
}

// SameRun reports whether rev runs what fn's spec says now (api.SameRevisionConfig of their
// snapshots): scaling, async and traffic settings are no part of a revision.
func SameRun(rev *v1.Revision, fn *v1.Function) bool {
	return api.SameRevisionConfig(RevisionConfigOf(&rev.Spec.CodeSpec), RevisionConfigOf(&fn.Spec.CodeSpec))
}

// MakeRevision renders fn's n-th revision: a snapshot of what its spec runs now,
// controlled by fn (deleting the function deletes its revisions and what runs them).
func MakeRevision(fn *v1.Function, n int64) *v1.Revision {
	return &v1.Revision{
		ObjectMeta: functionMeta(fn, rules.RevisionName(fn.Name, n)),
		Spec:       v1.RevisionSpec{Function: fn.Name, Number: n, CodeSpec: *fn.Spec.CodeSpec.DeepCopy()},
	}
}
