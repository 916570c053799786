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
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// Reconciler keeps the child Service and the status of every
// ServiceWithHealthchecks (StaleSlices deletes the slices no agent will
// update).
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

	// later queues a resource again at a time the reconciler chose
	// (SetupWithManager makes it).
	later *laterQueue
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
	// after asks for another pass then: a revert waits for its interval,
	// a forbidden write is retried.
	after time.Duration
}

// Reconcile brings one resource's Service and status in line, and deletes
// the built-in controller's slices an adoption or a selector left.
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

	// The agents' slices as listed: stale ones (StaleSlices deletes them)
	// count until they are gone, and their deletion brings the resource
	// back here.
	published, err := agentSlices(ctx, r.Client, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	if svc != nil && ownedBy(svc, swh) {
		var step builtinCleanup
		cond, requeue, step, err = r.cleanUpBuiltin(ctx, swh, svc, published, cond, requeue)
		if apierrors.IsForbidden(err) {
			cond, err = r.forbidden(cond, err), nil
			requeue = sooner(requeue, forbiddenRetry)
		}
		if err != nil {
			if step == cleanupAfterAdoption || step == cleanupAfterSelector {
				// Only the status tells the retry that built-in slices
				// remain (the selector is gone, the Service is owned).
				_, werr := r.writeStatus(ctx, swh, computeStatus(swh, svc, published, cond))
				return ctrl.Result{}, errors.Join(err, werr)
			}
			return ctrl.Result{}, err
		}
	}
	leases, err := exclusiveLeases(ctx, r.Client, swh)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.eventOnTransition(swh, cond)
	status := withFailStatic(withExclusive(computeStatus(swh, svc, published, cond), swh, leases, published), swh, published)
	res, err := r.writeStatus(ctx, swh, withFloor(status, swh, published))
	if err == nil && res.RequeueAfter == 0 {
		res.RequeueAfter = requeue
	}
	return res, err
}

// syncService creates, updates or adopts the child Service, puts back what
// someone else changed on it that changes traffic, and returns it with the
// ServiceSynced condition to report. decideService chooses each step from
// what the pass knows; this acts on it and records the outcome. A Service
// the API server refuses, or one the controller may not take, is a
// condition, not an error: retrying would fail the same way until the
// resource (or a permission) changes.
func (r *Reconciler) syncService(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) (serviceState, error) {
	svc := &corev1.Service{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(swh), svc)
	switch {
	case apierrors.IsNotFound(err):
		svc = nil
	case err != nil:
		return serviceState{}, fmt.Errorf("reading Service %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	p := &servicePass{swh: swh, svc: svc, before: svc, fieldOwner: r.FieldOwner}
	cond := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}
	// Each step is taken at most once (decideService checks what the pass
	// did), so a pass ends within as many decisions as there are steps.
	for range maxServiceSteps {
		d, err := decideService(p)
		if err != nil {
			return serviceState{}, err
		}
		switch d.step {
		case stepDone:
			return serviceState{svc: p.svc, cond: d.cond, after: d.after}, nil
		case stepRemoveSelector:
			if err := r.removeSelector(ctx, p.svc); err != nil {
				// Only a refusal is a condition: anything else may pass, and
				// a status saying "refused" would not be retried.
				switch {
				case apierrors.IsForbidden(err):
					return r.forbiddenState(p.svc, err), nil
				case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
					return serviceState{svc: p.svc, cond: r.rejected(cond, err)}, nil
				case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
					return serviceState{retry: true}, nil // the cache was behind
				}
				return serviceState{}, err
			}
			p.adopting = true
		case stepRevertSelector:
			pb, err := r.putBack(ctx, swh, p.svc, p.svc, onlySelector)
			if pb.done || err != nil {
				return pb.state, err
			}
			// What the apply then finds is the Service without the selector.
			p.svc, p.before, p.removedSelector, p.selectorReverted = pb.svc, pb.svc, pb.drift.selector, true
		case stepApply:
			applied, st, err := r.apply(ctx, swh, p.svc, p.adopting, d.owned)
			if applied == nil {
				return st, err
			}
			p.svc, p.applied = applied, true
		case stepRevertForeign:
			pb, err := r.putBack(ctx, swh, p.svc, p.before, nil)
			if pb.done || err != nil {
				return pb.state, err
			}
			if pb.drift.selector != "" {
				p.removedSelector = pb.drift.selector
			}
			p.svc, p.putBack, p.foreignReverted = pb.svc, pb, true
		}
	}
	return serviceState{}, fmt.Errorf("the child Service of %s/%s: no decision after %d steps", swh.Namespace, swh.Name, maxServiceSteps)
}

// apply server-side applies the spec and returns the Service read back.
// When it returns no Service, the pass ends with the state or the error: a
// refused apply is a condition, anything else an error to retry.
func (r *Reconciler) apply(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, adopting bool, owned drift) (*corev1.Service, serviceState, error) {
	cond := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}
	if err := r.Client.Apply(ctx, desiredService(swh), client.FieldOwner(r.FieldOwner), client.ForceOwnership); err != nil {
		r.Metrics.serviceWrite(writeResult(err))
		switch {
		case apierrors.IsForbidden(err):
			return nil, r.forbiddenState(svc, err), nil
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			log.FromContext(ctx).Info("the API server refused the child Service", "error", err.Error())
			return nil, serviceState{svc: svc, cond: r.rejected(cond, err)}, nil
		}
		return nil, serviceState{}, fmt.Errorf("applying Service %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	r.Metrics.serviceWrite("ok")
	log.FromContext(ctx).Info("applied the child Service", "adopting", adopting)
	if len(owned.changes) > 0 {
		r.reportRevert(ctx, swh, owned)
	}
	applied := &corev1.Service{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(swh), applied); err != nil {
		return nil, serviceState{}, fmt.Errorf("reading Service %s/%s back: %w", swh.Namespace, swh.Name, err)
	}
	return applied, serviceState{}, nil
}

// cleanUpBuiltin does what decideCleanup says is left to do about the
// built-in controller's slices of an owned Service, and returns the
// condition and wait that follow, and the step it took.
func (r *Reconciler) cleanUpBuiltin(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, agentSlices []discoveryv1.EndpointSlice, cond metav1.Condition, requeue time.Duration) (metav1.Condition, time.Duration, builtinCleanup, error) {
	var err error
	step := decideCleanup(cond, wasForbidden(swh))
	if step == cleanupLookForLeftovers {
		if cond, err = r.resumeAfterForbidden(ctx, swh, cond); err != nil {
			return cond, requeue, step, err
		}
		step = decideCleanup(cond, false)
	}
	switch step {
	case cleanupAfterAdoption:
		// Only slices an agent still updates say that the agents publish:
		// not those of a node just deleted, not yet collected.
		var stale map[*discoveryv1.EndpointSlice]string
		if stale, err = findStale(ctx, r.Client, r.APIReader, svc, agentSlices, true); err != nil {
			return cond, requeue, step, err
		}
		live := make([]discoveryv1.EndpointSlice, 0, len(agentSlices))
		for i := range agentSlices {
			if _, isStale := stale[&agentSlices[i]]; !isStale {
				live = append(live, agentSlices[i])
			}
		}
		cond, err = r.finishAdoption(ctx, swh, live, cond)
	case cleanupAfterSelector:
		var recheck time.Duration
		cond, recheck, err = r.finishSelectorRemoval(ctx, swh, cond)
		requeue = sooner(requeue, recheck)
	}
	return cond, requeue, step, err
}

// sooner returns the shorter of two waits, 0 meaning none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

func (r *Reconciler) rejected(cond metav1.Condition, err error) metav1.Condition {
	cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonServiceRejected
	cond.Message = fmt.Sprintf("the API server refused the Service: %v", err)
	return cond
}

// forbiddenState ends a pass whose write of the Service the API server
// forbade: a condition, retried every forbiddenRetry.
func (r *Reconciler) forbiddenState(svc *corev1.Service, err error) serviceState {
	return serviceState{svc: svc, cond: r.forbidden(metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}, err), after: forbiddenRetry}
}

// forbidden reports a write that RBAC or an admission plugin refused.
func (r *Reconciler) forbidden(cond metav1.Condition, err error) metav1.Condition {
	cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonForbidden
	cond.Message = fmt.Sprintf("the API server forbade a write of the controller (see its RBAC; retried every %s and on changes): %v", forbiddenRetry, err)
	return cond
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
