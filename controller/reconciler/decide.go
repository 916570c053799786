package reconciler

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// serviceStep is the next thing a pass does to the child Service.
type serviceStep int

const (
	// stepDone: nothing more to write; the decision's condition says how
	// the Service stands.
	stepDone serviceStep = iota
	// stepRemoveSelector: the first write of an adoption, before the
	// Service is the resource's.
	stepRemoveSelector
	// stepRevertSelector: put back a selector someone set on the owned
	// Service, first and even while the spec is refused (the built-in
	// controller publishes pods by readiness next to the agents' slices,
	// bypassing the probes; removing it takes no port down).
	stepRevertSelector
	// stepApply: server-side apply the spec (forced: fields a previous
	// owner held now belong to the resource).
	stepApply
	// stepRevertForeign: put back what someone else set on the Service
	// that the spec leaves unset.
	stepRevertForeign
)

// maxServiceSteps bounds the decisions of one pass: at most one per step
// (remove-selector and revert-selector never both), and the last.
const maxServiceSteps = 5

func (s serviceStep) String() string {
	switch s {
	case stepDone:
		return "done"
	case stepRemoveSelector:
		return "remove-selector"
	case stepRevertSelector:
		return "revert-selector"
	case stepApply:
		return "apply"
	case stepRevertForeign:
		return "revert-foreign"
	}
	return fmt.Sprintf("step(%d)", int(s))
}

// servicePass is what a pass knows of the child Service: what it observed
// and what it has done so far. syncService acts on each decision and
// records the outcome here before deciding again.
type servicePass struct {
	swh *swhv1alpha1.ServiceWithHealthchecks
	// svc is the Service as last read or written; nil while none exists.
	svc *corev1.Service
	// before is the Service as the pass found it, less a selector it put
	// back: what a value the spec drops is judged against (see putBack).
	before *corev1.Service
	// fieldOwner is the controller's server-side apply field manager.
	fieldOwner string

	// adopting: the selector of a Service that was not the resource's was
	// removed (stepRemoveSelector done).
	adopting bool
	// selectorReverted, applied, foreignReverted: those steps are done.
	selectorReverted, applied, foreignReverted bool
	// removedSelector is a selector someone set that the pass removed.
	removedSelector string
	// putBack is what the last revert left: held or deferred fields.
	putBack putBackResult
}

// serviceDecision is what decideService chose.
type serviceDecision struct {
	step serviceStep
	// cond is the ServiceSynced condition to report (stepDone), and after
	// when to look again (0: on the next event).
	cond  metav1.Condition
	after time.Duration
	// owned lists fields the controller's apply owns that someone else
	// changed (stepApply): reported once the apply puts them back.
	owned drift
}

// decideService chooses the pass's next step from what it knows, without
// reading or writing anything:
//
//  1. a Service that is not the resource's: wait for the garbage collector
//     when it belongs to a deleted resource of this name, refuse it unless
//     the resource asks to adopt it and nothing else controls it, else
//     remove its selector (the adoption's first write);
//  2. a selector someone set on the owned Service goes first;
//  3. a spec the API server refused stays refused until the resource
//     changes (retrying on every event would repeat the error), and
//     nothing else is put back meanwhile: the live Service is the last
//     applied spec, which the agents serve;
//  4. apply when there is no Service, on an adoption, when what the
//     controller owns differs from the spec, or when someone else changed
//     an owned field (only once the spec was applied: a previous owner may
//     share a value the new spec changes);
//  5. an adoption reports Adopting until the built-in slices go;
//  6. put back the fields the spec leaves unset that someone else set;
//  7. report Synced, SelectorRemoved, ServiceDrifted (a hidden proxy
//     label, fields held or deferred), with when to look again.
func decideService(p *servicePass) (serviceDecision, error) {
	swh, svc := p.swh, p.svc
	cond := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}
	if svc != nil && !p.adopting && !ownedBy(svc, swh) {
		if prev := previousIncarnation(svc, swh); prev != nil {
			// Its deletion wakes this resource (and so does the recheck).
			cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonAwaitingGarbageCollection
			cond.Message = fmt.Sprintf("Service %s still belongs to a deleted ServiceWithHealthchecks of this name (uid %s); "+
				"waiting for the garbage collector (kube-controller-manager) to delete it, then it is created again", swh.Name, prev.UID)
			return serviceDecision{cond: cond, after: garbageCollectionRecheck}, nil
		}
		if swh.Annotations[swhv1alpha1.AnnotationAdopt] != "true" {
			cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonServiceNotOwned
			cond.Message = fmt.Sprintf("Service %s exists and is not controlled by this resource; set the annotation %s: \"true\" to adopt it", swh.Name, swhv1alpha1.AnnotationAdopt)
			return serviceDecision{cond: cond}, nil
		}
		if owner := metav1.GetControllerOf(svc); owner != nil {
			cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonServiceNotOwned
			cond.Message = fmt.Sprintf("Service %s is controlled by %s %s; it cannot be adopted", swh.Name, owner.Kind, owner.Name)
			return serviceDecision{cond: cond}, nil
		}
		return serviceDecision{step: stepRemoveSelector}, nil
	}
	if svc != nil && !p.adopting && !p.selectorReverted && len(foreignDrift(swh, svc, p.fieldOwner, onlySelector).changes) > 0 {
		return serviceDecision{step: stepRevertSelector}, nil
	}
	prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
	if !p.adopting && !p.applied && prev != nil && prev.Reason == swhv1alpha1.ReasonServiceRejected && prev.ObservedGeneration == swh.Generation {
		if p.removedSelector != "" {
			return serviceDecision{cond: synced(swh, svc, p.fieldOwner, p.removedSelector)}, nil
		}
		return serviceDecision{cond: *prev}, nil
	}
	if !p.applied {
		if svc == nil || p.adopting {
			return serviceDecision{step: stepApply}, nil
		}
		var owned drift
		if specApplied(swh, prev) {
			owned = ownedDrift(swh, svc, p.fieldOwner)
		}
		upToDate, err := serviceUpToDate(svc, desiredService(swh), p.fieldOwner)
		if err != nil {
			return serviceDecision{}, err
		}
		if !upToDate || len(owned.changes) > 0 {
			return serviceDecision{step: stepApply, owned: owned}, nil
		}
	}
	if p.adopting {
		cond.Status, cond.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonAdopting
		cond.Message = "adopted the Service; the built-in controller's EndpointSlices stay until the agents publish theirs"
		return serviceDecision{cond: cond}, nil
	}
	if !p.foreignReverted && len(foreignDrift(swh, svc, p.fieldOwner, nil).changes) > 0 {
		return serviceDecision{step: stepRevertForeign}, nil
	}
	return serviceDecision{cond: drifting(synced(swh, svc, p.fieldOwner, p.removedSelector), p.putBack), after: p.putBack.wait}, nil
}

// builtinCleanup is what is left to do about the built-in EndpointSlice
// controller's slices once the child Service is the resource's and in line.
// The status carries it from pass to pass: Adopting and SelectorRemoved say
// such slices may remain.
type builtinCleanup int

const (
	cleanupNone builtinCleanup = iota
	// cleanupLookForLeftovers: a write was forbidden earlier, and the
	// status said Forbidden instead of what was left to do; an adoption or
	// a selector removal may have been stopped before its slices went.
	cleanupLookForLeftovers
	// cleanupAfterAdoption: delete them once the agents publish.
	cleanupAfterAdoption
	// cleanupAfterSelector: delete them now, and once more builtinRecheck
	// after the removal (the built-in controller may still write one).
	cleanupAfterSelector
)

// decideCleanup chooses from the ServiceSynced condition of this pass and
// whether the status says a write was forbidden.
func decideCleanup(cond metav1.Condition, wasForbidden bool) builtinCleanup {
	switch {
	case cond.Reason == swhv1alpha1.ReasonSynced && wasForbidden:
		return cleanupLookForLeftovers
	case cond.Reason == swhv1alpha1.ReasonAdopting:
		return cleanupAfterAdoption
	case cond.Reason == swhv1alpha1.ReasonSelectorRemoved:
		return cleanupAfterSelector
	}
	return cleanupNone
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
func synced(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, fieldOwner, removedSelector string) metav1.Condition {
	cond := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}
	if removedSelector != "" {
		cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonSelectorRemoved
		cond.Message = fmt.Sprintf("removed the selector %s someone set on the Service; deleting the built-in controller's EndpointSlices, which publish pods by readiness", removedSelector)
		return cond
	}
	if prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced); prev != nil &&
		(prev.Reason == swhv1alpha1.ReasonAdopting || prev.Reason == swhv1alpha1.ReasonSelectorRemoved) {
		return *prev
	}
	if note := proxyLabelDrift(swh, svc, fieldOwner); note != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, swhv1alpha1.ReasonServiceDrifted, note
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonSynced
	cond.Message = fmt.Sprintf("Service %s matches the spec", svc.Name)
	return cond
}
