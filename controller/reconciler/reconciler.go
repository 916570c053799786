package reconciler

import (
	"context"
	"errors"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
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

	// reverts limits how often a field of a child Service is put back
	// (SetupWithManager makes it).
	reverts *revertLimiter

	// recheck queues a resource again at a time the reconciler chose
	// (SetupWithManager makes it). A RequeueAfter would not do: the queue
	// merges it into any earlier pass, which may still see the status from
	// before the one that asked.
	recheck chan event.GenericEvent
}

// forbiddenRetry is how long the controller waits before trying again a
// write that RBAC or an admission plugin refused: granting the permission
// changes nothing it watches.
const forbiddenRetry = time.Minute

// builtinRecheck is how long after removing a selector someone added the
// built-in controller's slices are looked for again.
const builtinRecheck = 5 * time.Second

// garbageCollectionRecheck is how often a resource waiting for the garbage
// collector to delete its previous incarnation's Service looks again, in
// case the deletion event was missed.
const garbageCollectionRecheck = 5 * time.Second

// serviceState is what syncService found and did.
type serviceState struct {
	svc  *corev1.Service
	cond metav1.Condition
	// retry asks for another pass soon, with no status written: the cache
	// was behind the Service.
	retry bool
	// after asks for another pass then: a revert waits for its interval.
	after time.Duration
}

// Reconcile brings one resource's Service, slices and status in line.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := r.Client.Get(ctx, req.NamespacedName, swh); err != nil {
		// Deleted: the garbage collector removes the Service and, through
		// it, the slices.
		if apierrors.IsNotFound(err) {
			r.reverts.forget(req.NamespacedName)
			r.Metrics.forgetEndpoints(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !swh.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	st, err := r.syncService(ctx, swh)
	if err != nil {
		return ctrl.Result{}, err
	}
	if st.retry {
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	svc, cond, requeue := st.svc, st.cond, st.after

	slices := &discoveryv1.EndpointSliceList{}
	if err := r.Client.List(ctx, slices, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the slices of %s: %w", req.NamespacedName, err)
	}
	live := slices.Items
	if svc != nil && ownedBy(svc, swh) {
		// A refused apply leaves the Service as it was, and the agents go
		// on publishing its ports: none of their slices is stale for it.
		judgePorts := cond.Reason != swhv1alpha1.ReasonServiceRejected && cond.Reason != swhv1alpha1.ReasonForbidden
		live, err = r.collectStaleSlices(ctx, swh, svc, slices.Items, judgePorts)
		if err == nil && cond.Reason == swhv1alpha1.ReasonSynced && wasForbidden(swh) {
			cond, err = r.resumeAfterForbidden(ctx, swh, cond)
		}
		if err == nil {
			switch cond.Reason {
			case swhv1alpha1.ReasonAdopting:
				cond, err = r.finishAdoption(ctx, swh, live, cond)
			case swhv1alpha1.ReasonSelectorRemoved:
				var recheck time.Duration
				cond, recheck, err = r.finishSelectorRemoval(ctx, swh, cond)
				requeue = sooner(requeue, recheck)
			}
		}
		if apierrors.IsForbidden(err) {
			cond, err = r.forbidden(cond, err), nil
		}
		if err != nil {
			if cond.Reason == swhv1alpha1.ReasonSelectorRemoved || cond.Reason == swhv1alpha1.ReasonAdopting {
				// Only the status tells the retry that built-in slices
				// remain (the selector is gone, the Service is owned).
				_, werr := r.writeStatus(ctx, swh, computeStatus(swh, svc, live, cond))
				return ctrl.Result{}, errors.Join(err, werr)
			}
			return ctrl.Result{}, err
		}
	}
	r.eventOnTransition(swh, cond)
	res, err := r.writeStatus(ctx, swh, computeStatus(swh, svc, live, cond))
	if cond.Reason == swhv1alpha1.ReasonForbidden {
		requeue = sooner(requeue, forbiddenRetry)
	}
	if err == nil && res.RequeueAfter == 0 {
		res.RequeueAfter = requeue
	}
	return res, err
}

// syncService creates, updates or adopts the child Service, puts back what
// someone else changed on it that changes traffic, and returns it with the
// ServiceSynced condition to report. A Service the API server refuses, or
// one the controller may not take, is a condition, not an error: retrying
// would fail the same way until the resource (or a permission) changes.
func (r *Reconciler) syncService(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) (serviceState, error) {
	cond := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}
	svc := &corev1.Service{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(swh), svc)
	switch {
	case apierrors.IsNotFound(err):
		svc = nil
	case err != nil:
		return serviceState{}, fmt.Errorf("reading Service %s/%s: %w", swh.Namespace, swh.Name, err)
	}

	adopting := false
	if svc != nil && !ownedBy(svc, swh) {
		if prev := previousIncarnation(svc, swh); prev != nil {
			// Deleted and created again before the garbage collector got
			// to the Service: it deletes the Service and its slices, whose
			// deletion wakes this resource (and so does the recheck).
			cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonAwaitingGarbageCollection
			cond.Message = fmt.Sprintf("Service %s still belongs to a deleted ServiceWithHealthchecks of this name (uid %s); "+
				"waiting for the garbage collector (kube-controller-manager) to delete it, then it is created again", swh.Name, prev.UID)
			return serviceState{svc: svc, cond: cond, after: garbageCollectionRecheck}, nil
		}
		if swh.Annotations[swhv1alpha1.AnnotationAdopt] != "true" {
			cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonServiceNotOwned
			cond.Message = fmt.Sprintf("Service %s exists and is not controlled by this resource; set the annotation %s: \"true\" to adopt it", swh.Name, swhv1alpha1.AnnotationAdopt)
			return serviceState{svc: svc, cond: cond}, nil
		}
		if owner := metav1.GetControllerOf(svc); owner != nil {
			cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonServiceNotOwned
			cond.Message = fmt.Sprintf("Service %s is controlled by %s %s; it cannot be adopted", swh.Name, owner.Kind, owner.Name)
			return serviceState{svc: svc, cond: cond}, nil
		}
		if err := r.removeSelector(ctx, svc); err != nil {
			// Only a refusal is a condition: anything else may pass, and
			// a status saying "refused" would not be retried.
			switch {
			case apierrors.IsForbidden(err):
				return serviceState{svc: svc, cond: r.forbidden(cond, err)}, nil
			case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
				return serviceState{svc: svc, cond: r.rejected(cond, err)}, nil
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
				return serviceState{retry: true}, nil // the cache was behind
			}
			return serviceState{}, err
		}
		adopting = true
	}

	prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
	removedSelector := ""
	if svc != nil && !adopting {
		// A selector someone added goes at once, even while the spec is
		// refused: the built-in controller publishes the pods by
		// readiness next to the agents' slices, bypassing the probes, and
		// removing it takes no port down.
		pb, err := r.putBack(ctx, swh, svc, svc, onlySelector)
		if pb.done || err != nil {
			return pb.state, err
		}
		svc, removedSelector = pb.svc, pb.drift.selector
	}

	// A spec the API server refused stays refused until the resource
	// changes: retrying it on every event would only repeat the error.
	// Nothing else is put back meanwhile: the live Service is the last
	// applied spec, which the agents serve, and judging it by the refused
	// one would take down what it still has.
	if !adopting && prev != nil && prev.Reason == swhv1alpha1.ReasonServiceRejected && prev.ObservedGeneration == swh.Generation {
		if removedSelector != "" {
			return serviceState{svc: svc, cond: r.synced(swh, svc, cond, removedSelector)}, nil
		}
		return serviceState{svc: svc, cond: *prev}, nil
	}
	desired := desiredService(swh)
	before := svc
	apply := svc == nil || adopting
	var owned drift
	if !apply {
		// Owned fields another manager changed are drift only when the
		// apply is not a spec change: a previous owner (kubectl, before
		// an adoption) may share a value the new spec changes.
		if specApplied(swh, prev) {
			owned = ownedDrift(swh, svc, r.FieldOwner)
		}
		upToDate, err := serviceUpToDate(svc, desired, r.FieldOwner)
		if err != nil {
			return serviceState{}, err
		}
		apply = !upToDate || len(owned.changes) > 0
	}
	if apply {
		// Force: fields a previous owner (kubectl during an adoption) or
		// someone who changed them since held now belong to the resource.
		if err := r.Client.Apply(ctx, desired, client.FieldOwner(r.FieldOwner), client.ForceOwnership); err != nil {
			r.Metrics.serviceWrite(writeResult(err))
			switch {
			case apierrors.IsForbidden(err):
				return serviceState{svc: svc, cond: r.forbidden(cond, err)}, nil
			case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
				log.FromContext(ctx).Info("the API server refused the child Service", "error", err.Error())
				return serviceState{svc: svc, cond: r.rejected(cond, err)}, nil
			}
			return serviceState{}, fmt.Errorf("applying Service %s/%s: %w", swh.Namespace, swh.Name, err)
		}
		r.Metrics.serviceWrite("ok")
		log.FromContext(ctx).Info("applied the child Service", "adopting", adopting)
		if len(owned.changes) > 0 {
			r.reportRevert(ctx, swh, owned)
		}
		svc = &corev1.Service{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(swh), svc); err != nil {
			return serviceState{}, fmt.Errorf("reading Service %s/%s back: %w", swh.Namespace, swh.Name, err)
		}
	}
	if adopting {
		cond.Status, cond.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonAdopting
		cond.Message = "adopted the Service; the built-in controller's EndpointSlices stay until the agents publish theirs"
		return serviceState{svc: svc, cond: cond}, nil
	}

	// What the apply does not own, now that the Service carries the spec:
	// fields the spec leaves unset that someone else set.
	pb, err := r.putBack(ctx, swh, svc, before, nil)
	if pb.done || err != nil {
		return pb.state, err
	}
	if pb.drift.selector != "" {
		removedSelector = pb.drift.selector
	}
	return serviceState{svc: pb.svc, cond: drifting(r.synced(swh, pb.svc, cond, removedSelector), pb), after: pb.wait}, nil
}

// sooner returns the shorter of two waits, 0 meaning none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// specApplied reports whether the status says the controller already
// applied the resource's current generation.
func specApplied(swh *swhv1alpha1.ServiceWithHealthchecks, prev *metav1.Condition) bool {
	if prev == nil || prev.ObservedGeneration != swh.Generation {
		return false
	}
	switch prev.Reason {
	case swhv1alpha1.ReasonServiceRejected, swhv1alpha1.ReasonForbidden, swhv1alpha1.ReasonServiceNotOwned:
		return false
	}
	return true
}

// synced returns the ServiceSynced condition of an owned, current Service:
// built-in slices still to delete (an adoption, a selector just removed)
// stay visible, and so does a label that hides the Service from kube-proxy.
func (r *Reconciler) synced(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, cond metav1.Condition, removedSelector string) metav1.Condition {
	if removedSelector != "" {
		cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonSelectorRemoved
		cond.Message = fmt.Sprintf("removed the selector %s someone set on the Service; deleting the built-in controller's EndpointSlices, which publish pods by readiness", removedSelector)
		return cond
	}
	if prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced); prev != nil &&
		(prev.Reason == swhv1alpha1.ReasonAdopting || prev.Reason == swhv1alpha1.ReasonSelectorRemoved) {
		return *prev
	}
	if note := proxyLabelDrift(swh, svc, r.FieldOwner); note != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, swhv1alpha1.ReasonServiceDrifted, note
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonSynced
	cond.Message = fmt.Sprintf("Service %s matches the spec", svc.Name)
	return cond
}

func (r *Reconciler) rejected(cond metav1.Condition, err error) metav1.Condition {
	cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonServiceRejected
	cond.Message = fmt.Sprintf("the API server refused the Service: %v", err)
	return cond
}

// forbidden reports a write that RBAC or an admission plugin refused.
func (r *Reconciler) forbidden(cond metav1.Condition, err error) metav1.Condition {
	cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonForbidden
	cond.Message = fmt.Sprintf("the API server forbade a write of the controller (see its RBAC; retried every %s and on changes): %v", forbiddenRetry, err)
	return cond
}

// collectStaleSlices deletes the agents' slices no agent will update and
// returns the others. A deletion that is forbidden keeps the slice and is
// returned as the error, with the slices: the status is still worth writing.
func (r *Reconciler) collectStaleSlices(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, slices []discoveryv1.EndpointSlice, judgePorts bool) ([]discoveryv1.EndpointSlice, error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodeLabels := make(map[string]bool, len(nodes.Items))
	for i := range nodes.Items {
		nodeLabels[endpoints.NodeLabelValue(nodes.Items[i].Name)] = true
	}
	if missingNode(svc, slices, nodeLabels) {
		// The cache can lag behind a node created while its watch was down
		// (an API server restart): ask the API server before deleting the
		// slices of a node that may well exist.
		if err := r.APIReader.List(ctx, nodes); err != nil {
			return nil, fmt.Errorf("listing nodes from the API server: %w", err)
		}
		for i := range nodes.Items {
			nodeLabels[endpoints.NodeLabelValue(nodes.Items[i].Name)] = true
		}
	}
	stale := staleSlices(svc, slices, nodeLabels, judgePorts)
	live := make([]discoveryv1.EndpointSlice, 0, len(slices))
	var forbidden error
	for i := range slices {
		reason, isStale := stale[&slices[i]]
		if !isStale {
			live = append(live, slices[i])
			continue
		}
		// Preconditions: never delete a slice that changed since it was read.
		err := r.Client.Delete(ctx, &slices[i], client.Preconditions{UID: &slices[i].UID, ResourceVersion: &slices[i].ResourceVersion})
		if apierrors.IsForbidden(err) {
			live = append(live, slices[i])
			forbidden = fmt.Errorf("deleting stale slice %s/%s: %w", slices[i].Namespace, slices[i].Name, err)
			continue
		}
		if client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting stale slice %s/%s: %w", slices[i].Namespace, slices[i].Name, err)
		}
		r.Metrics.sliceCollected()
		log.FromContext(ctx).Info("deleted a stale EndpointSlice", "slice", slices[i].Name, "reason", reason)
	}
	return live, forbidden
}

func (r *Reconciler) writeStatus(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, status swhv1alpha1.ServiceWithHealthchecksStatus) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(swh)
	// status.disruption belongs to the eviction guard (controller/disruption):
	// written back as read, under the same resourceVersion, it is kept.
	status.Disruption = swh.Status.Disruption
	if statusEqual(swh.Status, status) {
		// Set here too: after a restart, the first pass finds the status
		// written.
		r.Metrics.setEndpoints(key, status.Ports)
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
		r.Metrics.statusWrite(writeResult(err))
		if apierrors.IsForbidden(err) {
			// No condition can say it: the event does.
			r.Recorder.Eventf(swh, nil, corev1.EventTypeWarning, swhv1alpha1.ReasonForbidden, "WriteStatus", "%s",
				eventNote(fmt.Sprintf("the API server forbade writing the status (see the controller's RBAC): %v", err)))
		}
		return ctrl.Result{}, fmt.Errorf("writing the status of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	r.Metrics.statusWrite("ok")
	r.Metrics.setEndpoints(key, status.Ports)
	return ctrl.Result{}, nil
}

// eventOnTransition emits an event when the ServiceSynced condition changes.
func (r *Reconciler) eventOnTransition(swh *swhv1alpha1.ServiceWithHealthchecks, cond metav1.Condition) {
	prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
	if (prev != nil && prev.Reason == cond.Reason && prev.Message == cond.Message) || cond.Reason == swhv1alpha1.ReasonSelectorRemoved {
		return // ServiceDriftReverted told the removal
	}
	kind := corev1.EventTypeNormal
	if cond.Status == metav1.ConditionFalse && cond.Reason != swhv1alpha1.ReasonAwaitingGarbageCollection {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(swh, nil, kind, cond.Reason, "SyncService", "%s", eventNote(cond.Message))
}
