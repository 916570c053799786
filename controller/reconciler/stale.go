package reconciler

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// StaleSlices deletes the agents' slices of a resource that no agent will
// update any more: their node is gone, or their port or address family is
// no longer one of the child Service's (staleSlices decides which). It runs
// apart from Reconciler, which writes the Service and the status: a deleted
// slice wakes that one, which then counts what is left.
type StaleSlices struct {
	// Client reads from the manager's cache and deletes slices.
	Client client.Client
	// APIReader lists nodes from the API server when the cache lacks the
	// node of a slice.
	APIReader client.Reader
	// Recorder emits an event on the resource when a deletion is forbidden.
	Recorder events.EventRecorder
	// Metrics counts deleted slices; nil counts nothing.
	Metrics *Metrics
}

// Reconcile deletes one resource's stale slices. A deletion RBAC or an
// admission plugin forbids is an event, retried after forbiddenRetry.
func (c *StaleSlices) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := c.Client.Get(ctx, req.NamespacedName, swh); err != nil {
		// Deleted: the garbage collector removes the Service and, through
		// it, the slices.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !swh.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	svc := &corev1.Service{}
	if err := c.Client.Get(ctx, req.NamespacedName, svc); err != nil {
		// No Service yet: its creation wakes this resource again.
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading Service %s: %w", req.NamespacedName, err)
	}
	if !ownedBy(svc, swh) {
		// Someone else's Service (or a previous incarnation's): the agents
		// do not publish for it, and its slices are not judged.
		return ctrl.Result{}, nil
	}
	slices, err := agentSlices(ctx, c.Client, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	err = c.collect(ctx, svc, slices, judgePorts(swh))
	if apierrors.IsForbidden(err) {
		c.Recorder.Eventf(swh, nil, corev1.EventTypeWarning, swhv1alpha1.ReasonForbidden, "DeleteStaleSlice", "%s",
			eventNote(fmt.Sprintf("the API server forbade deleting a slice no agent will update (see the controller's RBAC; retried every %s): %v", forbiddenRetry, err)))
		return ctrl.Result{RequeueAfter: forbiddenRetry}, nil
	}
	return ctrl.Result{}, err
}

// judgePorts reports whether the resource's slices may be judged by their
// port and address family: not while its status says the API server
// refused the spec or a write of the controller (the Service and the spec
// disagree), when only the slices of gone nodes go. The status may lag;
// the judging itself reads the live Service (findStale).
func judgePorts(swh *swhv1alpha1.ServiceWithHealthchecks) bool {
	c := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
	return c == nil || (c.Reason != swhv1alpha1.ReasonServiceRejected && c.Reason != swhv1alpha1.ReasonForbidden)
}

// collect deletes the agents' slices no agent will update. A forbidden
// deletion keeps the slice, the others are still tried, and it is returned
// as the error.
func (c *StaleSlices) collect(ctx context.Context, svc *corev1.Service, slices []discoveryv1.EndpointSlice, judgePorts bool) error {
	stale, err := findStale(ctx, c.Client, c.APIReader, svc, slices, judgePorts)
	if err != nil {
		return err
	}
	var forbidden error
	for s, reason := range stale {
		// Preconditions: never delete a slice that changed since it was read.
		err := c.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
		if apierrors.IsForbidden(err) {
			forbidden = errors.Join(forbidden, fmt.Errorf("deleting stale slice %s/%s: %w", s.Namespace, s.Name, err))
			continue
		}
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting stale slice %s/%s: %w", s.Namespace, s.Name, err)
		}
		c.Metrics.sliceCollected()
		log.FromContext(ctx).Info("deleted a stale EndpointSlice", "slice", s.Name, "reason", reason)
	}
	return forbidden
}

// SetupWithManager registers the collector and what wakes it up: any change
// of a resource (its status says whether the spec was applied), a Service
// of the same name, the agents' slices of the resource, and deleted nodes.
func (c *StaleSlices) SetupWithManager(mgr ctrl.Manager) error {
	nodeGone := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("staleslices").
		// A node deletion wakes every resource; each may ask the API server.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		For(&swhv1alpha1.ServiceWithHealthchecks{}).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(sameName)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(sliceOwner)).
		WatchesMetadata(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}},
			handler.EnqueueRequestsFromMapFunc(c.allResources), builder.WithPredicates(nodeGone)).
		Complete(c)
}

// allResources enqueues every resource: a deleted node may have slices of any.
func (c *StaleSlices) allResources(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := c.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing resources after a node deletion")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// sameName maps an object to the resource of the same name.
func sameName(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}}}
}

// sliceOwner maps a slice to the resource its service-name label names.
func sliceOwner(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[discoveryv1.LabelServiceName]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
