package reconcilers

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

// podTroubles are the waiting reasons of a container that cannot run its image (the
// kubelet's): a Function whose pods show one is not Ready, whatever its build says.
var podTroubles = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "CrashLoopBackOff": true}

// podTrouble returns the reason and a message naming the pod of the first of fn's pods that
// cannot run, or "" when none.
func (r *FunctionReconciler) podTrouble(ctx context.Context, fn *v1.Function) (string, string) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(fn.Namespace), client.MatchingLabels(scaling.FunctionLabels(fn))); err != nil {
		log.FromContext(ctx).Error(err, "listing the function's pods")
		return "", ""
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	for i := range pods.Items {
		if reason, msg := trouble(&pods.Items[i]); reason != "" {
			return reason, "pod " + pods.Items[i].Name + ": " + reason + ": " + msg
		}
	}
	return "", ""
}

func trouble(p *corev1.Pod) (string, string) {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && podTroubles[w.Reason] {
			return w.Reason, w.Message
		}
	}
	return "", ""
}

// podFunction maps a function pod to its Function; build pods (in the build namespace,
// labelled with the function's namespace) are the build Job watch's.
func podFunction(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[scaling.LabelFunction] == "" || l[scaling.LabelFunctionNamespace] != "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[scaling.LabelFunction]}}}
}

// podTroubleChanged passes a pod update only when a trouble starts, changes or ends, and a
// deletion (the trouble may leave with the pod): readiness flips stay out.
var podTroubleChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, _ := trouble(e.ObjectOld.(*corev1.Pod))
		after, _ := trouble(e.ObjectNew.(*corev1.Pod))
		return before != after
	},
}
