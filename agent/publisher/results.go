package publisher

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// onResult runs on the probe's goroutine for every result.
func (p *Publisher) onResult(r probes.Report[targetKey]) {
	o, known := p.targets.observe(r.Key, r.Result, r.Scheduled, r.Started, time.Now())
	if !known {
		return
	}
	p.metrics.observeProbe(o.mode, r.Result)
	// Every result, not only changes: a target re-created meanwhile must
	// not keep a pace it no longer has. Cheap when unchanged, and a no-op
	// for jobs without fast or down periods.
	p.scheduler.SetPace(r.Key, o.pace)
	for _, k := range o.repace {
		p.scheduler.SetPace(k, probes.PaceChanging)
	}
	if o.newProblem(r.Result) {
		// Configuration problems get their own event at once: no endpoint
		// transition may follow (a pod that never passed stays not ready).
		// The regarding probe, the related pod and the action (the reason)
		// keep the recorder from folding one pod's or probe's problem into
		// another's.
		regarding := &corev1.ObjectReference{
			Kind: "ServiceWithHealthchecks", APIVersion: swhv1alpha1.GroupVersion.String(),
			Namespace: r.Key.Resource.Namespace, Name: r.Key.Resource.Name, UID: o.owner,
			FieldPath: fmt.Sprintf("spec.healthcheck.probes[%d]", r.Key.Probe),
		}
		related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.Key.Resource.Namespace, Name: o.pod, UID: r.Key.Pod}
		p.emit(context.Background(), nil, []event{{regarding: regarding, related: related, eventtype: corev1.EventTypeWarning,
			reason: swhv1alpha1.EventReasonProbeMisconfigured, action: p.numbered("Probe:" + string(r.Result.Reason)),
			note: fmt.Sprintf("probe %d of pod %s on node %s: %s", r.Key.Probe, o.pod, p.nodeName, r.Result.Message)}})
	}
	if o.flipped {
		p.metrics.transition()
	}
	if o.damped {
		// Published at the end of its ejection, if it still passes.
		key := r.Key.Resource
		time.AfterFunc(time.Until(o.dampedUntil)+10*time.Millisecond, func() { p.notify(key) })
	}
	switch {
	case o.roundDone:
		// Every target of the resource reported for this round: no
		// other change of it can come, write now (rounds.go).
		p.notifyNow(r.Key.Resource)
	case o.flipped:
		p.notify(r.Key.Resource)
	case o.held || o.unheld:
		// Published the same, but why changed: the reconcile says so
		// (the reasons annotation, the FailingStatic event).
		p.notify(r.Key.Resource)
	case o.newReason && r.Result.Status == probes.Failure:
		// No verdict changed, but why a pod is not ready may have: the
		// reconcile reports it.
		p.notify(r.Key.Resource)
	}
}

// newProblem reports whether a result says that the probe cannot run, for
// another reason or message than the result before: told once per
// problem, not once per period.
func (o observation) newProblem(res probes.Result) bool {
	return misconfigured(res.Reason) && (o.newReason || o.newMessage)
}

func misconfigured(r probes.Reason) bool {
	return r == ReasonSecret || r == ReasonConfig || r == ReasonNoPort
}
