package access

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// CacheByObject is the manager's cache configuration for the kinds the
// package manages: only its own objects, not every ConfigMap, Role and
// RoleBinding of the cluster.
func CacheByObject() map[client.Object]cache.ByObject {
	ours := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})}
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:   ours,
		&rbacv1.Role{}:        ours,
		&rbacv1.RoleBinding{}: ours,
	}
}

// SetupWithManager registers the reconciler, keyed by namespace, and what
// wakes it up: a resource created, deleted or whose spec changed; a Service
// a resource controls (or controlled) created, deleted or changing owners;
// and any change to the objects it manages, so what someone else edits or
// deletes is put back.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("access").
		Watches(&swhv1alpha1.ServiceWithHealthchecks{}, byNamespace, builder.WithPredicates(specOrLife())).
		Watches(&corev1.Service{}, byNamespace, builder.WithPredicates(ownership())).
		Watches(&corev1.ConfigMap{}, byNamespace, builder.WithPredicates(named(ServicesConfigMap)))
	if r.AgentServiceAccount.Name != "" {
		b = b.Watches(&rbacv1.Role{}, byNamespace, builder.WithPredicates(named(SecretsGrant))).
			Watches(&rbacv1.RoleBinding{}, byNamespace, builder.WithPredicates(named(SecretsGrant)))
	}
	return b.Complete(r)
}

var byNamespace = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace()}}}
})

func named(name string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool { return obj.GetName() == name })
}

// specOrLife passes a resource's creation and deletion, the start of its
// deletion, and spec changes (its probes' Secrets), not its status writes.
func specOrLife() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// ownership passes the Services a resource controls (or controlled before
// an update) when they appear, go, or change owners.
func ownership() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return controlledBySWH(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return controlledBySWH(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return controlledBySWH(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return (controlledBySWH(e.ObjectOld) || controlledBySWH(e.ObjectNew)) &&
				!equality.Semantic.DeepEqual(e.ObjectOld.GetOwnerReferences(), e.ObjectNew.GetOwnerReferences())
		},
	}
}
