package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// maxActionBytes is the API server's limit on an event's action (its note's
// is swhv1alpha1.MaxEventNoteBytes).
const maxActionBytes = 128

// onlySelector limits putBack to a selector.
func onlySelector(field string) bool { return field == "selector" }

// putBackResult is what putBack did.
type putBackResult struct {
	// svc is the Service after it.
	svc *corev1.Service
	// drift is what it put back.
	drift drift
	// held is what a mutating admission put back on the controller's own
	// patch, now or earlier: not removed again until the Service or the
	// resource changes.
	held drift
	// deferred is what was put back too recently to be again; wait is
	// when it may be, interval how often at most.
	deferred       drift
	wait, interval time.Duration
	// done ends the pass with state: the cache was behind, or nothing
	// could be put back and the condition says why.
	done  bool
	state serviceState
}

// putBack removes what someone else set on the child Service that the spec
// leaves unset (the fields include accepts; nil: all), and reports it.
// before is the Service as the pass found it, before any apply: a value the
// controller's apply held there, which the spec dropped and a previous field
// manager still shares (kubectl, before an adoption), goes as part of the
// spec's change and is not reported as someone else's.
//
// Someone who sets a field again at once (a mutating admission webhook or
// policy on the patch itself, a controller that watches) would otherwise
// make an endless loop of writes: a field the patch came back with is held,
// and a field is put back at most once per interval, the interval doubling
// while it keeps coming back (see revertLimiter).
func (r *Reconciler) putBack(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, svc, before *corev1.Service, include func(string) bool) (putBackResult, error) {
	res := putBackResult{svc: svc}
	all := foreignDrift(swh, svc, r.FieldOwner, include)
	if len(all.changes) == 0 {
		return res, nil
	}
	key := client.ObjectKeyFromObject(swh)
	now := time.Now()
	g := r.reverts.gate(key, all.fields(), svc.ResourceVersion, swh.Generation, now)
	res.held, _ = all.split(func(c change) bool { return g.held[c.field] })
	res.deferred, _ = all.split(func(c change) bool { return g.deferred[c.field] })
	res.wait, res.interval = g.wait, g.interval
	d := foreignDrift(swh, svc, r.FieldOwner, func(f string) bool { return g.allowed[f] && (include == nil || include(f)) })
	if d.patch == nil {
		return res, nil
	}
	cond := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced}
	patched, err := r.revertDrift(ctx, svc, d)
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return putBackResult{done: true, state: serviceState{retry: true}}, nil // the cache was behind
	case apierrors.IsForbidden(err):
		return putBackResult{done: true, state: r.forbiddenState(svc, err)}, nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		cond.Status, cond.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonServiceDrifted
		cond.Message = fmt.Sprintf("someone changed the child Service (%s) and the API server refused to put it back: %v", d, err)
		return putBackResult{done: true, state: serviceState{svc: svc, cond: cond}}, nil
	case err != nil:
		return putBackResult{done: true}, err
	}
	r.reverts.reverted(key, d.fields(), now)
	// What the Service came back with: a mutating admission put it back.
	patchedFields := d.fields()
	again := foreignDrift(swh, patched, r.FieldOwner, func(f string) bool { return slices.Contains(patchedFields, f) })
	if len(again.changes) > 0 {
		r.reverts.hold(key, again.fields(), patched.ResourceVersion, swh.Generation)
		res.held.changes = append(res.held.changes, again.changes...)
		log.FromContext(ctx).Info("a mutating admission put back what the controller removed from the child Service; not removing it again until the Service or the resource changes",
			"changes", again.String())
	}
	stuck, _ := d.split(func(c change) bool { return !slices.Contains(again.fields(), c.field) })
	if again.selector == "" {
		stuck.selector = d.selector
	}
	spec, others := stuck.split(func(c change) bool { return before != nil && appliedBy(before, r.FieldOwner, c.path...) })
	if len(spec.changes) > 0 {
		log.FromContext(ctx).Info("removed what the spec no longer sets and a previous field manager still held", "changes", spec.String())
	}
	if len(others.changes) > 0 {
		r.reportRevert(ctx, swh, others)
	}
	res.svc, res.drift = patched, stuck
	return res, nil
}

// drifting returns the condition of a pass that left someone else's change
// on the Service: held or deferred. cond is what the pass found otherwise;
// a condition other than Synced or ServiceDrifted says more and is kept.
func drifting(cond metav1.Condition, pb putBackResult) metav1.Condition {
	if cond.Reason != swhv1alpha1.ReasonSynced && cond.Reason != swhv1alpha1.ReasonServiceDrifted {
		return cond
	}
	var notes []string
	if len(pb.held.changes) > 0 {
		notes = append(notes, fmt.Sprintf("a mutating admission webhook or policy sets %s again on every write of the child Service; "+
			"the controller stops removing it until the Service or the resource changes", pb.held))
	}
	if len(pb.deferred.changes) > 0 {
		notes = append(notes, fmt.Sprintf("someone sets %s again right after the controller removes it; it is removed at most once every %s while that goes on",
			pb.deferred, pb.interval))
	}
	if len(notes) == 0 {
		return cond
	}
	if cond.Reason == swhv1alpha1.ReasonServiceDrifted {
		notes = append(notes, cond.Message)
	}
	cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, swhv1alpha1.ReasonServiceDrifted, strings.Join(notes, ". ")
	return cond
}

// revertDrift puts back the fields of d.patch with a JSON merge patch: null
// removes a field whoever owns it (server-side apply cannot remove what
// another field manager owns), and the API server defaults it again. The
// resource version guards it: a Service that changed since the cache saw
// it is a conflict, never overwritten.
func (r *Reconciler) revertDrift(ctx context.Context, svc *corev1.Service, d drift) (*corev1.Service, error) {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"spec":     d.patch,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the patch of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	patched := svc.DeepCopy()
	if err := r.Client.Patch(ctx, patched, client.RawPatch(types.MergePatchType, body), client.FieldOwner(r.FieldOwner)); err != nil {
		r.Metrics.serviceWrite(writeResult(err))
		return nil, fmt.Errorf("putting back Service %s/%s (%s): %w", svc.Namespace, svc.Name, d, err)
	}
	r.Metrics.serviceWrite("ok")
	return patched, nil
}

// reportRevert counts, logs and tells on the resource what was put back.
// The fields are in the action too: the event recorder folds events of the
// same action into the first one's note.
func (r *Reconciler) reportRevert(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, d drift) {
	r.Metrics.reverted(d.fields())
	log.FromContext(ctx).Info("put back what someone else changed on the child Service", "changes", d.String())
	r.Recorder.Eventf(swh, nil, corev1.EventTypeWarning, swhv1alpha1.EventReasonServiceDriftReverted, swhv1alpha1.TruncateMessage("RevertService:"+strings.Join(d.fields(), ","), maxActionBytes),
		"%s", eventNote("put back the child Service, changed by someone else: "+d.String()))
}

// writeResult is the result label of a failed write.
func writeResult(err error) string {
	if apierrors.IsForbidden(err) {
		return "forbidden"
	}
	return "error"
}

// eventNote cuts a note to what the API server accepts (a longer one is
// refused and the event lost).
func eventNote(note string) string {
	return swhv1alpha1.TruncateMessage(note, swhv1alpha1.MaxEventNoteBytes)
}
