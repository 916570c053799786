package publisher

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// portRef names a port of the resource in messages: by its name, or by its
// number (the endpoint's) when it has none.
type portRef struct {
	name   string
	number int32
}

// String renders `"web"` or `8080`.
func (p portRef) String() string {
	if p.name == "" && p.number != 0 {
		return strconv.Itoa(int(p.number))
	}
	return strconv.Quote(p.name)
}

// id renders `web` or `8080`, for actions.
func (p portRef) id() string {
	if p.name == "" && p.number != 0 {
		return strconv.Itoa(int(p.number))
	}
	return p.name
}

// portCause is a port and why the pod is not ready on it.
type portCause struct {
	port portRef
	why  cause
}

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
	// action names what the event says (see seriesAction).
	action string
	note   string
}

// emit records events on swh, or on what they regard, and logs each: the
// one place the agent's events reach the recorder. Each gets the action
// that keeps the recorder from folding it into an event that says
// something else, or into a series it would not write for minutes
// (seriesAction), and a note cut to what the API server takes.
func (p *Publisher) emit(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, evs []event) {
	logger := log.FromContext(ctx)
	for _, e := range evs {
		var regarding runtime.Object = swh
		var key any = swh
		if e.regarding != nil {
			regarding, key = e.regarding, e.regarding
		}
		// A nil reference must reach the recorder as a nil interface.
		var related runtime.Object
		relatedName := ""
		if e.related != nil {
			related, relatedName = e.related, e.related.Name
		}
		logger.Info("event", "type", e.eventtype, "reason", e.reason, "related", relatedName, "note", e.note)
		action := p.told.seriesAction(eventKey(key, e.related, e.eventtype, e.reason), e.action)
		p.recorder.Eventf(regarding, related, e.eventtype, e.reason, action, "%s", eventNote(e.note))
	}
}

// endpointEvents tells the endpoints' news once their slices are published
// (after is what is published now, before what was before this reconcile):
// per pod, one event for the ports that became ready, one for the ports
// that became not ready or are not ready for a new reason. See decide for
// what is news. Events relate to the pod, and their action names the ports
// and causes, so that two events that say different things are never
// folded into one.
func (p *Publisher) endpointEvents(swh *swhv1alpha1.ServiceWithHealthchecks, before, after []discoveryv1.EndpointSlice, why notReadyReasons) []event {
	resource := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	var out []event
	for _, n := range p.told.endpointNews(resource, readiness(ownedBy(resource, before)), readiness(after), why) {
		related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: swh.Namespace, Name: n.pod.name, UID: n.pod.uid}
		if len(n.ready) > 0 {
			out = append(out, event{related: related, eventtype: corev1.EventTypeNormal, reason: swhv1alpha1.EventReasonEndpointReady,
				action: readyAction(n.ready), note: fmt.Sprintf("pod %s on node %s is ready on %s", n.pod.name, p.nodeName, portClause(n.ready, ""))})
		}
		if len(n.notReady) == 0 {
			continue
		}
		eventtype := corev1.EventTypeNormal // the start state, or terminating
		if n.warning() {
			eventtype = corev1.EventTypeWarning
		}
		out = append(out, event{related: related, eventtype: eventtype, reason: swhv1alpha1.EventReasonEndpointNotReady,
			action: notReadyAction(n.notReady), note: fmt.Sprintf("pod %s on node %s is not ready on %s", n.pod.name, p.nodeName, notReadyClauses(n.notReady))})
	}
	return out
}

// collisionEvents tells SliceNameTaken once per collision (again after a
// restart of the agent), relating it to the slice that holds the name so
// that two collisions are two events.
func (p *Publisher) collisionEvents(swh *swhv1alpha1.ServiceWithHealthchecks, collisions []endpoints.Collision) []event {
	resource := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	var out []event
	for _, c := range p.told.newCollisions(resource, collisions) {
		holder := &corev1.ObjectReference{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1", Namespace: swh.Namespace, Name: c.Name}
		out = append(out, event{related: holder, eventtype: corev1.EventTypeWarning, reason: swhv1alpha1.EventReasonSliceNameTaken,
			action: "PublishEndpoints", note: c.String()})
	}
	return out
}

// notReadyClauses groups ports by reason: `port "a" (why)`, or
// `ports "a", "b" (why); port "c" (other)`, in port order.
func notReadyClauses(ports []portCause) string {
	sortPorts(ports)
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

func sortPorts(ports []portCause) {
	slices.SortFunc(ports, func(a, b portCause) int { return strings.Compare(a.port.id(), b.port.id()) })
}

// maxActionBytes is the API server's limit on an events.k8s.io action,
// less room for seriesAction's suffix.
const maxActionBytes = 128 - 8

// readyAction is `PublishEndpoints:web,smtp`.
func readyAction(ports []portRef) string {
	ids := make([]string, len(ports))
	for i, p := range ports {
		ids[i] = p.id()
	}
	slices.Sort(ids)
	return publishAction(ids)
}

// notReadyAction is `PublishEndpoints:smtp=refused@1,web=http-status@0`.
func notReadyAction(ports []portCause) string {
	sortPorts(ports)
	items := make([]string, len(ports))
	for i, pc := range ports {
		items[i] = pc.port.id() + "=" + pc.why.code()
	}
	return publishAction(items)
}

// publishAction joins items, or digests them when too long: two events with
// the same action say the same thing either way.
func publishAction(items []string) string {
	a := "PublishEndpoints:" + strings.Join(items, ",")
	if len(a) <= maxActionBytes {
		return a
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(a))
	return fmt.Sprintf("PublishEndpoints:%016x", h.Sum64())
}

type podRef struct {
	uid  types.UID
	name string
}

type podPort struct {
	uid  types.UID
	pod  string
	port string
}

// publishedPort is a pod's endpoint on one port of the resource.
type publishedPort struct {
	port  portRef
	ready bool
}

// readiness lists the endpoints of the agent's slices (one port each) by
// pod and port name, as endpoints.Read reads them: ready when every
// address family's entry is.
func readiness(list []discoveryv1.EndpointSlice) map[podPort]publishedPort {
	out := map[podPort]publishedPort{}
	// The default options are valid: no error.
	published, _ := endpoints.Read(list, endpoints.Options{})
	for _, p := range published {
		if p.Pod == nil {
			continue
		}
		key := podPort{uid: p.Pod.UID, pod: p.Pod.Name, port: p.Port}
		prev, seen := out[key]
		out[key] = publishedPort{port: portRef{name: p.Port, number: p.PortNumber}, ready: p.Ready && (prev.ready || !seen)}
	}
	return out
}

// eventNote cuts a note to what the API server accepts (a longer one is
// refused and the event lost), on a rune boundary, marking the cut.
func eventNote(note string) string {
	return swhv1alpha1.TruncateMessage(note, swhv1alpha1.MaxEventNoteBytes)
}
