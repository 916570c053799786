package kubectlswh

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Why explains, in sentences, everything that decides the traffic of pod
// (which may be one the resource does not select) on each port of the
// resource in s.
func Why(s *Snapshot, pod *corev1.Pod, now time.Time) []string {
	r := s.Resource
	var out []string
	say := func(format string, args ...any) { out = append(out, sentence(fmt.Sprintf(format, args...))) }
	selector := labels.SelectorFromSet(r.Spec.Selector)
	if len(r.Spec.Selector) == 0 {
		say("%s/%s has no selector: it selects no pod, and its endpoints are whatever someone else writes", r.Namespace, r.Name)
		return out
	}
	if !selector.Matches(labels.Set(pod.Labels)) {
		say("pod %s does not match the selector {%s} of %s/%s: it gets no traffic from it", pod.Name, selector, r.Namespace, r.Name)
		return out
	}
	say("pod %s is selected by %s/%s (selector {%s})", pod.Name, r.Namespace, r.Name, selector)
	switch {
	case pod.Spec.NodeName == "":
		say("it is not scheduled on a node yet: nothing publishes it")
		return out
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		say("it has finished (%s): it is never published", pod.Status.Phase)
		return out
	case pod.Status.PodIP == "":
		say("it has no IP address yet: nothing publishes it")
		return out
	}
	node := s.nodeStatus(pod.Spec.NodeName)
	switch node.Ready {
	case "True":
		say("it runs on node %s, which is Ready", node.Name)
	case "False", "Unknown":
		say("it runs on node %s, whose Ready condition is %s: the controller (and the agent, if alive) withdraw the node's endpoints, so it gets no traffic", node.Name, node.Ready)
	default:
		say("it runs on node %s (Ready: %s)", node.Name, node.Ready)
	}
	switch {
	case s.AgentsError != nil:
		say("whether the agent of node %s runs is unknown: %v", node.Name, s.AgentsError)
	case node.Agent == "":
		say("no agent pod runs on node %s: nothing probes or publishes its pods, and what was published stays", node.Name)
	case node.AgentReady:
		say("the agent of node %s (pod %s) is ready: it probes the pod and publishes the verdicts", node.Name, node.Agent)
	default:
		say("the agent of node %s (pod %s) is not ready: the endpoints below are what it last published, frozen until it is back", node.Name, node.Agent)
	}
	say("the pod's Ready condition is %v", endpoints.PodReady(pod))
	if pod.DeletionTimestamp != nil {
		say("the pod is terminating: it keeps serving while it passes (endpoints terminating, not ready), for clients that already use it")
	}
	if s.Service == nil {
		say("the child Service %s does not exist yet: the controller creates it, then the agents publish", r.Name)
		return out
	}
	if s.Service.Spec.PublishNotReadyAddresses {
		say("the Service publishes not-ready addresses: every endpoint is ready to kube-proxy and DNS whatever the probes say; serving tells whether it passes")
	}

	var probes []swhv1alpha1.Probe
	if r.Spec.Healthcheck != nil {
		probes = r.Spec.Healthcheck.Probes
	}
	targets := make([]intstr.IntOrString, len(probes))
	names := probeNames(r)
	for i := range probes {
		targets[i] = probes[i].TargetPort()
	}
	grouping, err := endpoints.NewGrouping(s.Service.Spec.Ports, targets)
	if err != nil {
		say("the probes cannot be matched to ports (%v)", err)
		return out
	}
	gates := grouping.Gates(pod)
	for i, port := range s.Service.Spec.Ports {
		label := portLabel(port.Name, port.Port)
		gate := gates[i]
		if gate.Port == 0 {
			say("%s: its targetPort %s names no port of the pod, so the pod is not published on it", label, port.TargetPort.String())
			continue
		}
		resolved := ""
		if port.TargetPort.Type == intstr.String {
			resolved = fmt.Sprintf(" (named targetPort %q is %d on this pod)", port.TargetPort.StrVal, gate.Port)
		}
		if gate.Probes.Empty() {
			say("%s → pod port %d%s: no probe gates it, so it follows the pod's Ready condition (%v)", label, gate.Port, resolved, endpoints.PodReady(pod))
		} else {
			var gating []string
			for p := range gate.Probes.All() {
				gating = append(gating, fmt.Sprintf("probe %d (%s)", p, names[p]))
			}
			must := "which must pass"
			if len(gating) > 1 {
				must = "which must all pass"
			}
			say("%s → pod port %d%s: gated by %s, %s", label, gate.Port, resolved, strings.Join(gating, " and "), must)
		}
		ep := s.endpoint(pod, port.Name, names)
		ep.Stale = ep.Published && agentDown(node.AgentState)
		out = append(out, "  "+published(ep, now))
		if r := ep.Reason; r != nil && ReasonHint(r.Reason) != "" {
			out = append(out, "  "+sentence("reason "+r.Reason+": "+ReasonHint(r.Reason)))
		}
	}
	return out
}

// published says what the slices hold for one endpoint.
func published(ep EndpointStatus, now time.Time) string {
	var b strings.Builder
	b.WriteString("published: ")
	b.WriteString(state(ep))
	if r := ep.Reason; r != nil {
		fmt.Fprintf(&b, ", %s", r.Reason)
		if a := age(r.Since, now); a != "" {
			fmt.Fprintf(&b, " for %s", a)
		}
		if r.Message != "" {
			fmt.Fprintf(&b, ": %s", r.Message)
		}
	}
	if ep.Stale {
		b.WriteString("; stale: the node's agent is not running")
	}
	return sentence(b.String())
}
