package publisher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// notReadyReasons says, per pod and port name, why the pod is not ready on
// that port.
type notReadyReasons map[types.UID]map[string]string

func (r notReadyReasons) set(pod types.UID, port, why string) {
	if r[pod] == nil {
		r[pod] = map[string]string{}
	}
	r[pod][port] = why
}

// explainNotReady tells why a port's gate does not pass, from the probes
// that gate it: the first failing one's reason and message, or why no
// verdict is there yet.
func explainNotReady(pod *corev1.Pod, gate endpoints.PortGate, passing endpoints.ProbeSet, last []probes.Result, labels []string) string {
	switch {
	case gate.Port == 0:
		return "the port's targetPort names no port of the pod"
	case gate.Probes.Empty():
		return "no probe checks this port and the pod is not Ready"
	case pod.DeletionTimestamp != nil && passing.Contains(gate.Probes):
		return "the pod is terminating; it serves while its probes pass"
	}
	waiting := ""
	for i := range last {
		if !gate.Probes.Has(i) || passing.Has(i) {
			continue
		}
		switch last[i].Status {
		case probes.Failure:
			return fmt.Sprintf("%s: %s: %s", labels[i], last[i].Reason, last[i].Message)
		case probes.Success:
			if waiting == "" {
				waiting = labels[i] + " passes again, not yet successThreshold times"
			}
		default:
			if waiting == "" {
				waiting = labels[i] + " has no result yet"
			}
		}
	}
	if waiting == "" {
		waiting = "its probes have not passed yet"
	}
	return waiting
}

// reportTransitions emits one event per pod whose readiness on some port
// changed between the slices that existed and the ones written, naming the
// ports and why. The event relates to the pod: the recorder folds
// isomorphic events (same resource, related object, reason and action)
// within 6 minutes into a series that keeps its first note, so one series
// per resource would hide every pod but the first. Each transition is also
// logged with its own reasons.
func (p *Publisher) reportTransitions(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, before, after []discoveryv1.EndpointSlice, why notReadyReasons) {
	was, now := readiness(before), readiness(after)
	type change struct {
		pod   podRef
		ready bool
	}
	changed := map[change][]string{}
	for key, ready := range now {
		if prev, ok := was[key]; ok && prev == ready {
			continue
		}
		c := change{podRef{key.uid, key.pod}, ready}
		changed[c] = append(changed[c], key.port)
	}
	logger := log.FromContext(ctx)
	for c, ports := range changed {
		related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: swh.Namespace, Name: c.pod.name, UID: c.pod.uid}
		if c.ready {
			note := fmt.Sprintf("pod %s on node %s is ready on %s", c.pod.name, p.NodeName, portClause(ports, ""))
			logger.Info("endpoint ready", "pod", c.pod.name, "ports", ports)
			p.Recorder.Eventf(swh, related, corev1.EventTypeNormal, "EndpointReady", "PublishEndpoints", "%s", eventNote(note))
			continue
		}
		note := fmt.Sprintf("pod %s on node %s is not ready on %s", c.pod.name, p.NodeName, notReadyClauses(ports, why[c.pod.uid]))
		logger.Info("endpoint not ready", "pod", c.pod.name, "note", note)
		p.Recorder.Eventf(swh, related, corev1.EventTypeWarning, "EndpointNotReady", "PublishEndpoints", "%s", eventNote(note))
	}
}

// notReadyClauses groups ports by reason: `port "a" (why)`, or
// `ports "a", "b" (why); port "c" (other)`, in port order.
func notReadyClauses(ports []string, why map[string]string) string {
	slices.Sort(ports)
	var reasons []string
	byReason := map[string][]string{}
	for _, port := range ports {
		r := why[port]
		if r == "" {
			r = "not passing"
		}
		if byReason[r] == nil {
			reasons = append(reasons, r)
		}
		byReason[r] = append(byReason[r], port)
	}
	clauses := make([]string, len(reasons))
	for i, r := range reasons {
		clauses[i] = portClause(byReason[r], r)
	}
	return strings.Join(clauses, "; ")
}

// portClause renders `port "a"` or `ports "a", "b"`, then ` (why)` when why
// is set.
func portClause(ports []string, why string) string {
	slices.Sort(ports)
	quoted := make([]string, len(ports))
	for i, n := range ports {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	s := "port " + quoted[0]
	if len(quoted) > 1 {
		s = "ports " + strings.Join(quoted, ", ")
	}
	if why != "" {
		s += " (" + why + ")"
	}
	return s
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

func readiness(list []discoveryv1.EndpointSlice) map[podPort]bool {
	out := map[podPort]bool{}
	for i := range list {
		s := &list[i]
		port := ""
		if len(s.Ports) > 0 && s.Ports[0].Name != nil {
			port = *s.Ports[0].Name
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				continue
			}
			key := podPort{uid: ep.TargetRef.UID, pod: ep.TargetRef.Name, port: port}
			out[key] = out[key] || ep.Conditions.Ready == nil || *ep.Conditions.Ready
		}
	}
	return out
}

// maxNoteBytes is the API server's limit on an events.k8s.io note; a longer
// one is refused and the event lost.
const maxNoteBytes = 1024

// eventNote cuts a note to maxNoteBytes on a rune boundary, marking the cut.
func eventNote(note string) string {
	if len(note) <= maxNoteBytes {
		return note
	}
	const mark = "…"
	cut := maxNoteBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + mark
}
