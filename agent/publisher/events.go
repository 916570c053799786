package publisher

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// series), which is how a standing problem told at every reconcile
	// costs no write. Transitions are never folded (transitionAction).
	action string
	note   string
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
		note := eventNote(e.note)
		if e.related == nil {
			logger.Info("event", "type", e.eventtype, "reason", e.reason, "note", e.note)
			// A nil reference must reach the recorder as a nil interface.
			p.recorder.Eventf(regarding, nil, e.eventtype, e.reason, e.action, "%s", note)
			continue
		}
		logger.Info("event", "type", e.eventtype, "reason", e.reason, "related", e.related.Name, "note", e.note)
		p.recorder.Eventf(regarding, e.related, e.eventtype, e.reason, e.action, "%s", note)
	}
}

// transitionAction is the action of an endpoint's transition: numbered,
// so that the recorder never folds one into an earlier one. It writes the
// third and later occurrences of a series only when the series ends,
// minutes later: a pod failing the same way a third time would show its
// recovery before as its newest event.
func (p *Publisher) transitionAction() string {
	return "PublishEndpoints#" + strconv.FormatUint(p.transitions.Add(1), 10)
}

// endpointEvents tells what changed for the endpoints of a resource between
// the slices before this reconcile and after it (see endpointNews): per
// pod, one event for the ports that became ready and one for the ports
// that became not ready or are not ready for a new reason, related to the
// pod.
func (p *Publisher) endpointEvents(swh *swhv1alpha1.ServiceWithHealthchecks, before, after []discoveryv1.EndpointSlice, why notReadyReasons) []event {
	resource := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	var out []event
	for _, n := range endpointNews(publishedStates(ownedBy(resource, before)), publishedStates(after), why) {
		related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: swh.Namespace, Name: n.pod.name, UID: n.pod.uid}
		if len(n.ready) > 0 {
			out = append(out, event{related: related, eventtype: corev1.EventTypeNormal, reason: swhv1alpha1.EventReasonEndpointReady,
				action: p.transitionAction(), note: fmt.Sprintf("pod %s on node %s is ready on %s", n.pod.name, p.nodeName, portClause(n.ready, ""))})
		}
		if len(n.notReady) == 0 {
			continue
		}
		eventtype := corev1.EventTypeNormal // the start state, or terminating
		if n.warning() {
			eventtype = corev1.EventTypeWarning
		}
		out = append(out, event{related: related, eventtype: eventtype, reason: swhv1alpha1.EventReasonEndpointNotReady,
			action: p.transitionAction(), note: fmt.Sprintf("pod %s on node %s is not ready on %s", n.pod.name, p.nodeName, notReadyClauses(n.notReady))})
	}
	return out
}

// collisionEvents tells SliceNameTaken for every collision, relating it to
// the slice that holds the name so that two collisions are two events; a
// collision told at every reconcile is folded by the recorder.
func (p *Publisher) collisionEvents(swh *swhv1alpha1.ServiceWithHealthchecks, collisions []endpoints.Collision) []event {
	var out []event
	for _, c := range collisions {
		holder := &corev1.ObjectReference{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1", Namespace: swh.Namespace, Name: c.Name}
		out = append(out, event{related: holder, eventtype: corev1.EventTypeWarning, reason: swhv1alpha1.EventReasonSliceNameTaken,
			action: "PublishEndpoints", note: c.String()})
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
