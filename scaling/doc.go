// Package scaling decides how a Function becomes running instances. The Make* functions are
// pure renderers — object in, Kubernetes/KEDA objects out, no client and no context — so the
// reconcilers stay thin and every rendered object is table-tested and checked against a real
// API server that has KEDA's and the HTTP add-on's CRDs.
package scaling
