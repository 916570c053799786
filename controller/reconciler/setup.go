package reconciler

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// SetupOptions tune the reconciler's controller.
type SetupOptions struct {
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
}

// SetupWithManager registers the reconciler and what wakes it up: changes
// of a resource's spec, labels or annotations (not its status, which the
// reconciler writes itself), any Service of the same name (so a conflicting
// Service that goes away is replaced), the agents' slices of the resource
// (whose deletion by StaleSlices changes the status), the exclusive
// ports' Leases (whose holder the status shows), and the rechecks the
// reconciler schedules itself.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts SetupOptions) error {
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 4
	}
	r.later = &laterQueue{}
	r.reverts = newRevertLimiter()
	return ctrl.NewControllerManagedBy(mgr).
		Named("servicewithhealthchecks").
		For(&swhv1alpha1.ServiceWithHealthchecks{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(sameName)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(sliceOwner)).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(leaseOwner)).
		WatchesRawSource(r.later.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Complete(r)
}
