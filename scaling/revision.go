package scaling

import (
	"k8s.io/apimachinery/pkg/api/equality"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
)

// runSpec is the part of a function's code spec a revision snapshots, as compared: the
// source by content hash only (a new upload of the same code is not a change).
func runSpec(c *v1.CodeSpec) v1.CodeSpec {
	out := *c.DeepCopy()
	if out.Source != nil {
		out.Source = &v1.SourceRef{SHA256: out.Source.SHA256}
	}
	return out
}

// SameRun reports whether rev runs what fn's spec says now: scaling, async and traffic
// settings are no part of a revision.
func SameRun(rev *v1.Revision, fn *v1.Function) bool {
	return equality.Semantic.DeepEqual(runSpec(&rev.Spec.CodeSpec), runSpec(&fn.Spec.CodeSpec))
}

// MakeRevision renders fn's n-th revision: a snapshot of what its spec runs now,
// controlled by fn (deleting the function deletes its revisions and what runs them).
func MakeRevision(fn *v1.Function, n int64) *v1.Revision {
	return &v1.Revision{
		ObjectMeta: functionMeta(fn, rules.RevisionName(fn.Name, n)),
		Spec:       v1.RevisionSpec{Function: fn.Name, Number: n, CodeSpec: *fn.Spec.CodeSpec.DeepCopy()},
	}
}
