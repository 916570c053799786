package reconciler

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// recheckBuffer bounds the rechecks waiting to be queued.
const recheckBuffer = 1024

// SetupOptions tune the reconciler's controller.
type SetupOptions struct {
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
}

// SetupWithManager registers the reconciler and what wakes it up: changes
// of a resource's spec, labels or annotations (not its status, which the
// reconciler writes itself), any Service of the same name (so a conflicting
// Service that goes away is replaced), the agents' slices of the resource,
// deleted nodes (whose slices must go), and the rechecks the reconciler
// schedules itself.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts SetupOptions) error {
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 4
	}
	sameName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
	})
	sliceOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[discoveryv1.LabelServiceName]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
	})
	nodeGone := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	r.recheck = make(chan event.GenericEvent, recheckBuffer)
	r.reverts = newRevertLimiter()
	return ctrl.NewControllerManagedBy(mgr).
		Named("servicewithhealthchecks").
		For(&swhv1alpha1.ServiceWithHealthchecks{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Service{}, sameName).
		Watches(&discoveryv1.EndpointSlice{}, sliceOwner).
		WatchesMetadata(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}},
			handler.EnqueueRequestsFromMapFunc(r.allResources), builder.WithPredicates(nodeGone)).
		WatchesRawSource(source.Channel(r.recheck, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Complete(r)
}

// allResources enqueues every resource: a deleted node may have slices of any.
func (r *Reconciler) allResources(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing resources after a node deletion")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}
