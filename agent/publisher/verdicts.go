package publisher

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// verdicts decides, per pod and port, whether the pod passes, and why not.
// On a node that is not Ready, nothing passes: the controller withdraws the
// node's endpoints when its agent cannot, and an agent that can must
// publish the same, or the two would undo each other.
func (p *Publisher) verdicts(view *resourceView) ([]endpoints.PodVerdicts, notReadyReasons) {
	verdicts := make([]endpoints.PodVerdicts, 0, len(view.pods))
	why := notReadyReasons{}
	nodeNotReady := endpoints.NodeNotReady(view.node)
	exclusive := map[int]bool{}
	for _, x := range view.exclusive {
		exclusive[x.index] = true
	}
	for _, pod := range view.pods {
		st := p.targets.passing(view.key, pod.UID, len(view.probes))
		passing, last := st.passing, st.last
		// Held probes count as passing while kubelet says the pod is
		// Ready, never on an exclusive port (failstatic.go).
		held := st.held
		if !endpoints.PodReady(pod) {
			held = 0
		}
		var kept endpoints.ProbeSet // the held probes that keep a port
		gates := view.grouping.Gates(pod)
		ports := make([]endpoints.PortVerdict, len(gates))
		maintained := swhv1alpha1.Maintenance(pod)
		for i, gate := range gates {
			ports[i] = gate.Verdict(passing, endpoints.PodReady(pod))
			effective := passing
			if !held.Empty() && !exclusive[i] {
				// A failure of another probe is named, not a held one.
				effective = passing | held
				if v := gate.Verdict(passing|held, true); !ports[i].Passing && v.Passing && !(maintained != nil && maintained(view.portNames[i])) {
					ports[i] = v
					kept |= held & gate.Probes
					if pod.DeletionTimestamp == nil {
						why.set(pod.UID, view.portNames[i], keptCause(gate, passing, st, view.labels, p.nodeName))
					}
				}
			}
			switch {
			case nodeNotReady && ports[i].Port != 0:
				ports[i].Passing = false
				why.set(pod.UID, view.portNames[i], nodeNotReadyCause(p.nodeName))
			case maintained != nil && maintained(view.portNames[i]) && ports[i].Port != 0:
				ports[i].Passing = false
				why.set(pod.UID, view.portNames[i], maintenanceCause)
			case !ports[i].Passing || pod.DeletionTimestamp != nil:
				c := explainNotReady(pod, gate, effective, last, view.labels)
				if c.kind != causeFailure && effective != passing {
					// Nothing failing but held probes: say why.
					c = explainNotReady(pod, gate, passing, last, view.labels)
				}
				why.set(pod.UID, view.portNames[i], c)
			}
		}
		if !st.held.Empty() {
			p.targets.setKept(view.key, pod.UID, st.held, kept)
		}
		verdicts = append(verdicts, endpoints.PodVerdicts{Pod: pod, Ports: ports})
	}
	return verdicts, why
}

// causeKind sorts the reasons a pod is not ready on a port.
type causeKind uint8

const (
	// causeFailure: a probe failed or cannot run, or the pod is not Ready
	// on a port no probe checks. A Warning.
	causeFailure causeKind = iota
	// causeStart: no verdict yet (a probe has no result, or passes again
	// fewer than successThreshold times). Every pod goes through it: no
	// news, and no Warning.
	causeStart
	// causeTerminating: the pod is being deleted and serves while it passes.
	causeTerminating
	// causeStandby: the pod passes an exclusive port that another pod
	// holds (or that cannot be held yet). News, but no Warning.
	causeStandby
	// causeMaintenance: the pod's maintenance annotation takes it out of
	// the port on purpose. News, but no Warning.
	causeMaintenance
	// causeKept: the pod fails a probe of the port, and a hold keeps it
	// published ready because the checker is suspected (failstatic.go).
	// The hold has its own event.
	causeKept
)

// maintenanceCause is the cause of a port a pod's maintenance annotation
// takes out.
var maintenanceCause = cause{kind: causeMaintenance, reason: swhv1alpha1.ReasonMaintenance,
	text: "taken out by its " + swhv1alpha1.AnnotationMaintenance + " annotation"}

// codePodNotReady is the cause of a port that follows pod readiness.
const codePodNotReady = swhv1alpha1.ReasonPodNotReady

// nodeNotReadyCause is the cause of every port of a node that is not Ready.
func nodeNotReadyCause(node string) cause {
	return cause{kind: causeFailure, reason: swhv1alpha1.ReasonNodeNotReady, text: fmt.Sprintf("node %s is not Ready", node)}
}

// cause says why a pod is not ready on a port.
type cause struct {
	kind causeKind
	// reason is machine-readable: a probe's reason, pending, recovering,
	// pod-not-ready, terminating, no-target-port or node-not-ready.
	reason string
	// probe is the index of the probe the reason is about; nil when it is
	// about none.
	probe *int32
	// text is for people.
	text string
}

// probeCause is a cause about probe i.
func probeCause(kind causeKind, reason string, i int, text string) cause {
	index := int32(i)
	return cause{kind: kind, reason: reason, probe: &index, text: text}
}

// code identifies the reason and its probe, "<reason>@<probe index>" or
// the reason alone: it changes when the reason does, not when only the
// message does. Event actions carry it.
func (c cause) code() string {
	if c.probe == nil {
		return c.reason
	}
	return c.reason + "@" + strconv.Itoa(int(*c.probe))
}

// notReadyReasons says, per pod and port name, why the pod is not ready on
// that port.
type notReadyReasons map[types.UID]map[string]cause

func (r notReadyReasons) set(pod types.UID, port string, why cause) {
	if r[pod] == nil {
		r[pod] = map[string]cause{}
	}
	r[pod][port] = why
}

// explainNotReady tells why a port's gate does not pass, from the probes
// that gate it: the first failing one's reason and message, or why no
// verdict is there yet; or why a passing port is not ready.
func explainNotReady(pod *corev1.Pod, gate endpoints.PortGate, passing endpoints.ProbeSet, last []probes.Result, labels []string) cause {
	switch {
	case gate.Port == 0:
		return cause{kind: causeFailure, reason: swhv1alpha1.ReasonNoTargetPort, text: "the port's targetPort names no port of the pod"}
	case pod.DeletionTimestamp != nil && gate.Verdict(passing, endpoints.PodReady(pod)).Passing:
		if gate.Probes.Empty() {
			return cause{kind: causeTerminating, reason: swhv1alpha1.ReasonTerminating, text: "the pod is terminating; it serves while it is Ready"}
		}
		return cause{kind: causeTerminating, reason: swhv1alpha1.ReasonTerminating, text: "the pod is terminating; it serves while its probes pass"}
	case gate.Probes.Empty():
		return cause{kind: causeFailure, reason: codePodNotReady, text: "no probe checks this port and the pod is not Ready"}
	}
	var waiting *cause
	for i := range last {
		if !gate.Probes.Has(i) || passing.Has(i) {
			continue
		}
		switch last[i].Status {
		case probes.Failure:
			return probeCause(causeFailure, string(last[i].Reason), i, fmt.Sprintf("%s: %s: %s", labels[i], last[i].Reason, last[i].Message))
		case probes.Success:
			if waiting == nil {
				c := probeCause(causeStart, swhv1alpha1.ReasonRecovering, i, labels[i]+" passes again, not yet successThreshold times")
				waiting = &c
			}
		default:
			if waiting == nil {
				c := probeCause(causeStart, swhv1alpha1.ReasonPending, i, labels[i]+" has no result yet")
				waiting = &c
			}
		}
	}
	if waiting == nil {
		return cause{kind: causeStart, reason: swhv1alpha1.ReasonPending, text: "its probes have not passed yet"}
	}
	return *waiting
}
