package reconciler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Reconciler keeps the child Service, the slice hygiene and the status of
// every ServiceWithHealthchecks.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly: for objects the cache
	// does not hold (the built-in controller's slices during an adoption).
	APIReader client.Reader
	// Recorder emits events on the resource.
	Recorder events.EventRecorder
	// FieldOwner is the server-side apply field manager of the child Service.
	FieldOwner string
	// Metrics counts writes; nil counts nothing.
	Metrics *Metrics
}

// Reconcile brings one resource's Service, slices and status in line.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := r.Client.Get(ctx, req.NamespacedName, swh); err != nil {
		// Deleted: the garbage collector removes the Service and, through
		// it, the slices.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !swh.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	svc, svcCond, err := r.syncService(ctx, swh)
	if err != nil {
		return ctrl.Result{}, err
	}

	slices := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, slices, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the slices of %s: %w", req.NamespacedName, err)
	}
	live := slices.Items
	if svc != nil && ownedBy(svc, swh) {
		live, err = r.collectStaleSlices(ctx, swh, svc, slices.Items)
		if err != nil {
			return ctrl.Result{}, err
		}
		if svcCond.Reason == ReasonAdopting {
			svcCond, err = r.finishAdoption(ctx, swh, live, svcCond)
			if err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	r.eventOnTransition(swh, svcCond)
	return r.writeStatus(ctx, swh, computeStatus(swh, svc, live, svcCond))
}

// syncService creates, updates or adopts the child Service and returns it
// with the ServiceSynced condition to report. A Service the API server
// refuses, or one the controller may not take, is a condition, not an error:
// retrying would fail the same way until the resource changes.
func (r *Reconciler) syncService(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) (*corev1.Service, metav1.Condition, error) {
	cond := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}
	svc := &corev1.Service{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(swh), svc)
	switch {
	case apierrors.IsNotFound(err):
		svc = nil
	case err != nil:
		return nil, cond, fmt.Errorf("reading Service %s/%s: %w", swh.Namespace, swh.Name, err)
	}

	adopting := false
	if svc != nil && !ownedBy(svc, swh) {
		if swh.Annotations[AdoptAnnotation] != "true" {
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonServiceConflict
			cond.Message = fmt.Sprintf("Service %s exists and is not controlled by this resource; set the annotation %s: \"true\" to adopt it", swh.Name, AdoptAnnotation)
			return svc, cond, nil
		}
		if owner := metav1.GetControllerOf(svc); owner != nil {
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonServiceConflict
			cond.Message = fmt.Sprintf("Service %s is controlled by %s %s; it cannot be adopted", swh.Name, owner.Kind, owner.Name)
			return svc, cond, nil
		}
		if err := r.removeSelector(ctx, svc); err != nil {
			return svc, r.rejected(cond, err), nil
		}
		adopting = true
	}

	// A spec the API server refused stays refused until the resource
	// changes: retrying it on every event would only repeat the error.
	if prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced); !adopting && prev != nil &&
		prev.Reason == ReasonServiceRejected && prev.ObservedGeneration == swh.Generation {
		return svc, *prev, nil
	}
	desired := desiredService(swh)
	if svc != nil && !adopting {
		upToDate, err := serviceUpToDate(svc, desired, r.FieldOwner)
		if err != nil {
			return nil, cond, err
		}
		if upToDate {
			return svc, r.synced(swh, svc, cond), nil
		}
	}
	// Force: fields a previous owner (kubectl during an adoption) held
	// now belong to the resource.
	if err := r.Client.Apply(ctx, desired, client.FieldOwner(r.FieldOwner), client.ForceOwnership); err != nil {
		r.Metrics.serviceWrite("error")
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			log.FromContext(ctx).Info("the API server refused the child Service", "error", err.Error())
			return svc, r.rejected(cond, err), nil
		}
		return nil, cond, fmt.Errorf("applying Service %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	r.Metrics.serviceWrite("ok")
	log.FromContext(ctx).Info("applied the child Service", "adopting", adopting)
	applied := &corev1.Service{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(swh), applied); err != nil {
		return nil, cond, fmt.Errorf("reading Service %s/%s back: %w", swh.Namespace, swh.Name, err)
	}
	if adopting {
		cond.Status, cond.Reason = metav1.ConditionTrue, ReasonAdopting
		cond.Message = "adopted the Service; the built-in controller's EndpointSlices stay until the agents publish theirs"
		return applied, cond, nil
	}
	return applied, r.synced(swh, applied, cond), nil
}

// synced returns the ServiceSynced condition of an owned, current Service,
// keeping an adoption in progress visible.
func (r *Reconciler) synced(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, cond metav1.Condition) metav1.Condition {
	if prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced); prev != nil && prev.Reason == ReasonAdopting {
		return *prev
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, ReasonServiceSynced
	cond.Message = fmt.Sprintf("Service %s matches the spec", svc.Name)
	return cond
}

func (r *Reconciler) rejected(cond metav1.Condition, err error) metav1.Condition {
	cond.Status, cond.Reason = metav1.ConditionFalse, ReasonServiceRejected
	cond.Message = fmt.Sprintf("the API server refused the Service: %v", err)
	return cond
}

// collectStaleSlices deletes the agents' slices no agent will update and
// returns the others.
func (r *Reconciler) collectStaleSlices(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, slices []discoveryv1.EndpointSlice) ([]discoveryv1.EndpointSlice, error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodeLabels := make(map[string]bool, len(nodes.Items))
	for i := range nodes.Items {
		nodeLabels[endpoints.NodeLabelValue(nodes.Items[i].Name)] = true
	}
	stale := staleSlices(swh, slices, nodeLabels, svc.Spec.IPFamilies)
	live := make([]discoveryv1.EndpointSlice, 0, len(slices))
	for i := range slices {
		reason, isStale := stale[&slices[i]]
		if !isStale {
			live = append(live, slices[i])
			continue
		}
		// Preconditions: never delete a slice that changed since it was read.
		err := r.Client.Delete(ctx, &slices[i], client.Preconditions{UID: &slices[i].UID, ResourceVersion: &slices[i].ResourceVersion})
		if client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting stale slice %s/%s: %w", slices[i].Namespace, slices[i].Name, err)
		}
		r.Metrics.sliceCollected()
		log.FromContext(ctx).Info("deleted a stale EndpointSlice", "slice", slices[i].Name, "reason", reason)
	}
	return live, nil
}

func (r *Reconciler) writeStatus(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, status swhv1alpha1.ServiceWithHealthchecksStatus) (ctrl.Result, error) {
	if statusEqual(swh.Status, status) {
		return ctrl.Result{}, nil
	}
	updated := swh.DeepCopy()
	updated.Status = status
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) {
			// The cache was behind. Status-only changes do not wake the
			// reconciler, so ask for another pass (it will read the newer
			// object once the cache has it).
			r.Metrics.statusWrite("conflict")
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		r.Metrics.statusWrite("error")
		return ctrl.Result{}, fmt.Errorf("writing the status of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	r.Metrics.statusWrite("ok")
	return ctrl.Result{}, nil
}

// eventOnTransition emits an event when the ServiceSynced condition changes.
func (r *Reconciler) eventOnTransition(swh *swhv1alpha1.ServiceWithHealthchecks, cond metav1.Condition) {
	prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
	if prev != nil && prev.Reason == cond.Reason && prev.Message == cond.Message {
		return
	}
	kind := corev1.EventTypeNormal
	if cond.Status == metav1.ConditionFalse {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(swh, nil, kind, cond.Reason, "SyncService", "%s", cond.Message)
}
