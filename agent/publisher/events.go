package publisher

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// event is what a stage of a reconcile, or a probe result, has to tell.
// The stages decide what happened; emit alone talks to the recorder.
type event struct {
	// regarding is what the event is about when it is not the resource
	// itself (one of its probes); nil for the resource.
	regarding *corev1.ObjectReference
	// related is the pod, slice or Secret the event is about; nil for none.
	related   *corev1.ObjectReference
	eventtype string
	reason    string
	// action names what the event says: the recorder folds an event into
	// an earlier one of the same type, reason, action and objects (a
	// series: the second occurrence written at once, the later ones when
	// the series ends or every 30 minutes). News are never folded
	// (numbered).
	action string
	note   string
	// standing marks a problem told at every reconcile while it stands:
	// the recorder folds the repeats, and its log line is at verbosity 1.
	standing bool
}

// emit records events on swh, or on what they regard, and logs each: the
// one place the agent's events reach the recorder. Notes are cut to what
// the API server takes.
func (p *Publisher) emit(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, evs []event) {
	logger := log.FromContext(ctx)
	for _, e := range evs {
		regarding := e.regarding
		if regarding == nil {
			// No resourceVersion: a status update must not start a new
			// series of the same news.
			regarding = &corev1.ObjectReference{Kind: "ServiceWithHealthchecks", APIVersion: swhv1alpha1.GroupVersion.String(),
				Namespace: swh.Namespace, Name: swh.Name, UID: swh.UID}
		}
		note, log := eventNote(e.note), logger
		if e.standing {
			log = logger.V(1)
		}
		if e.related == nil {
			log.Info("event", "type", e.eventtype, "reason", e.reason, "note", e.note)
			// A nil reference must reach the recorder as a nil interface.
			p.recorder.Eventf(regarding, nil, e.eventtype, e.reason, e.action, "%s", note)
			continue
		}
		log.Info("event", "type", e.eventtype, "reason", e.reason, "related", e.related.Name, "note", e.note)
		p.recorder.Eventf(regarding, e.related, e.eventtype, e.reason, e.action, "%s", note)
	}
}

// numbered returns action with a number of its own, for news that the
// recorder must not fold into an earlier event: it writes the third and
// later occurrences of a series only when the series ends, minutes later,
// and keeps the first one's note, so a pod failing the same way a third
// time would show its recovery before as its newest event.
func (p *Publisher) numbered(action string) string {
	return action + "#" + strconv.FormatUint(p.toldCount.Add(1), 10)
}

// endpointEvents tells what changed for the endpoints of a resource between
// what its slices published before and what they publish after (see
// endpointNews): per pod, one event for the ports that became ready and one
// for the ports that became not ready or are not ready for a new reason,
// related to the pod.
func (p *Publisher) endpointEvents(swh *swhv1alpha1.ServiceWithHealthchecks, before, after map[podPort]endpointState, why notReadyReasons) []event {
	var out []event
	for _, n := range endpointNews(before, after, why) {
		related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: swh.Namespace, Name: n.pod.name, UID: n.pod.uid}
		if len(n.ready) > 0 {
			out = append(out, event{related: related, eventtype: corev1.EventTypeNormal, reason: swhv1alpha1.EventReasonEndpointReady,
				action: p.numbered("PublishEndpoints"), note: fmt.Sprintf("pod %s on node %s is ready on %s", n.pod.name, p.nodeName, portClause(n.ready, ""))})
		}
		if len(n.notReady) == 0 {
			continue
		}
		eventtype := corev1.EventTypeNormal // the start state, or terminating
		if n.warning() {
			eventtype = corev1.EventTypeWarning
		}
		out = append(out, event{related: related, eventtype: eventtype, reason: swhv1alpha1.EventReasonEndpointNotReady,
			action: p.numbered("PublishEndpoints"), note: fmt.Sprintf("pod %s on node %s is not ready on %s", n.pod.name, p.nodeName, notReadyClauses(n.notReady))})
	}
	return out
}

// collisionEvents tells SliceNameTaken for every collision whose slice
// under its other name was not published when news were last told: the
// news of a collision, once (an agent that restarts finds the slice made).
// It relates the event to the slice that holds the name, so that two
// collisions are two events.
func (p *Publisher) collisionEvents(swh *swhv1alpha1.ServiceWithHealthchecks, before publication, changes endpoints.Changes) []event {
	var out []event
	for _, c := range changes.Collisions {
		if before.names[c.Renamed] {
			continue
		}
		holder := &corev1.ObjectReference{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1", Namespace: swh.Namespace, Name: c.Name}
		out = append(out, event{related: holder, eventtype: corev1.EventTypeWarning, reason: swhv1alpha1.EventReasonSliceNameTaken,
			action: p.numbered("PublishEndpoints"), note: c.String()})
	}
	return out
}

// notReadyClauses groups ports by reason: `port "a" (why)`, or
// `ports "a", "b" (why); port "c" (other)`, in port order.
func notReadyClauses(ports []portCause) string {
	slices.SortFunc(ports, func(a, b portCause) int { return strings.Compare(a.port.id(), b.port.id()) })
	var reasons []string
	byReason := map[string][]portRef{}
	for _, pc := range ports {
		r := pc.why.text
		if r == "" {
			r = "not passing"
		}
		if byReason[r] == nil {
			reasons = append(reasons, r)
		}
		byReason[r] = append(byReason[r], pc.port)
	}
	clauses := make([]string, len(reasons))
	for i, r := range reasons {
		clauses[i] = portClause(byReason[r], r)
	}
	return strings.Join(clauses, "; ")
}

// portClause renders `port "a"`, `port 8080` or `ports "a", "b"`, then
// ` (why)` when why is set.
func portClause(ports []portRef, why string) string {
	slices.SortFunc(ports, func(a, b portRef) int { return strings.Compare(a.id(), b.id()) })
	names := make([]string, len(ports))
	for i, p := range ports {
		names[i] = p.String()
	}
	s := "port " + names[0]
	if len(names) > 1 {
		s = "ports " + strings.Join(names, ", ")
	}
	if why != "" {
		s += " (" + why + ")"
	}
	return s
}

// eventNote cuts a note to what the API server accepts (a longer one is
// refused and the event lost), on a rune boundary, marking the cut.
func eventNote(note string) string {
	return swhv1alpha1.TruncateMessage(note, swhv1alpha1.MaxEventNoteBytes)
}
