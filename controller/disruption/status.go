package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// DefaultResync is how often a budget is counted again with nothing
// watched changing: the selected pods are read from the API server, not
// watched, so a pod that appears without a slice (Pending) shows here
// within this time.
const DefaultResync = 30 * time.Second

// StatusReconciler keeps status.disruption of the resources with a budget
// current between evictions: the counts, the pods that do not count, and
// the reservations, of which it drops those whose pod is terminating or
// gone or that expired. It clears the block when the budget goes. It
// writes with the resourceVersion of what it read, like the guard.
type StatusReconciler struct {
	Sources
	Client client.Client
	// Resync defaults to DefaultResync.
	Resync time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

// Reconcile implements reconcile.Reconciler.
func (r *StatusReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := r.Client.Get(ctx, req.NamespacedName, swh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	var want *swhv1alpha1.DisruptionStatus
	after := r.Resync
	if after <= 0 {
		after = DefaultResync
	}
	if swh.Spec.DisruptionBudget != nil {
		in, err := r.read(ctx, swh, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		ev := Evaluate(in)
		want = ev.Status(swh.Generation)
		if next := nextExpiry(ev.Reservations, r.timeout()); !next.IsZero() && next.Sub(now) < after {
			after = max(next.Sub(now), 0) + 100*time.Millisecond
		}
	}
	if equality.Semantic.DeepEqual(swh.Status.Disruption, want) {
		return ctrl.Result{RequeueAfter: requeueIf(want != nil, after)}, nil
	}
	updated := swh.DeepCopy()
	updated.Status.Disruption = want
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			// A guard or the other reconciler wrote first: count again
			// once the cache has it.
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // deleted meanwhile
		}
		return ctrl.Result{}, fmt.Errorf("writing the disruption status of %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{RequeueAfter: requeueIf(want != nil, after)}, nil
}

func requeueIf(ok bool, d time.Duration) time.Duration {
	if ok {
		return d
	}
	return 0
}

func (r *StatusReconciler) timeout() time.Duration {
	if r.ReservationTimeout > 0 {
		return r.ReservationTimeout
	}
	return DefaultReservationTimeout
}

func nextExpiry(rs []swhv1alpha1.DisruptionReservation, timeout time.Duration) time.Time {
	var next time.Time
	for _, res := range rs {
		if t := res.Time.Add(timeout); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// SetupWithManager registers the reconciler: it runs on the leader only.
func (r *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	budgeted := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		swh, ok := obj.(*swhv1alpha1.ServiceWithHealthchecks)
		return ok && (swh.Spec.DisruptionBudget != nil || swh.Status.Disruption != nil)
	})
	sliceOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[discoveryv1.LabelServiceName]
		if name == "" || obj.GetLabels()[discoveryv1.LabelManagedBy] != endpoints.DefaultManagedBy {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("disruption").
		For(&swhv1alpha1.ServiceWithHealthchecks{}, builder.WithPredicates(budgeted)).
		Watches(&discoveryv1.EndpointSlice{}, sliceOwner).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allBudgets), builder.WithPredicates(readyChanged()))
	if r.Agent.Name != "" {
		agents := predicate.NewPredicateFuncs(func(obj client.Object) bool {
			p, ok := obj.(*corev1.Pod)
			return ok && p.Namespace == r.Agent.Namespace && p.Spec.ServiceAccountName == r.Agent.Name
		})
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.allBudgets), builder.WithPredicates(agents))
	}
	return b.Complete(r)
}

// allBudgets enqueues every resource with a budget: a node or an agent
// changed, and any of them may have pods there.
func (r *StatusReconciler) allBudgets(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing resources with a disruption budget")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Spec.DisruptionBudget != nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// readyChanged passes node events that can change a node's verdicts.
func readyChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return !ok1 || !ok2 || nodeReadyStatus(o) != nodeReadyStatus(n)
		},
	}
}

func nodeReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
