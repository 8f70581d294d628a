// Package reconcilers holds one controller-runtime reconciler per sless kind. Each follows
// the same shape: get → deletion/finalizer → snapshot → reconcile<Kind> mutates status in
// memory while children are rendered by package scaling and written only on difference →
// one status patch, sent only when the status changed.
package reconcilers
