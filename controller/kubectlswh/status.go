package kubectlswh

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Status is the report of `kubectl swh status`, also its JSON and YAML.
type Status struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Summary is the one-line answer.
	Summary string `json:"summary"`
	// ReadyPods counts the selected pods ready on every port.
	ReadyPods int `json:"readyPods"`
	// Pods counts the selected pods.
	Pods  int          `json:"pods"`
	Ports []PortStatus `json:"ports"`
	// Nodes are the nodes of the selected pods.
	Nodes []NodeStatus `json:"nodes"`
}

// PortStatus is one Service port and every selected pod on it.
type PortStatus struct {
	Name      string           `json:"name"`
	Port      int32            `json:"port"`
	Ready     int              `json:"ready"`
	Endpoints []EndpointStatus `json:"endpoints"`
	// Exclusive is set for a port of spec.exclusive; Holder then names
	// the pod that holds it and its node, as the status says ("" for
	// none).
	Exclusive bool   `json:"exclusive,omitempty"`
	Holder    string `json:"holder,omitempty"`
	// Kept counts the ready endpoints (in Ready) that fail their probes
	// and are kept published: by fail static, a lag floor or the port's
	// floor (their reason says which).
	Kept int `json:"kept,omitempty"`
}

// EndpointStatus is one pod on one port, as published.
type EndpointStatus struct {
	Pod  string `json:"pod"`
	Node string `json:"node,omitempty"`
	// Published is false when no slice of the port holds the pod; the
	// conditions are then false.
	Published   bool `json:"published"`
	Ready       bool `json:"ready"`
	Serving     bool `json:"serving"`
	Terminating bool `json:"terminating"`
	// Reason says why the pod is not ready (or not published), or why it
	// is ready although its probes fail (fail-static, floor-open, …); nil
	// when it is ready and passes.
	Reason *Reason `json:"reason,omitempty"`
	// Stale is set when the node's agent is not running: the conditions
	// are what it last published.
	Stale bool `json:"stale,omitempty"`
	// Addresses and PodPort are where the published endpoint sends
	// traffic: the pod's addresses and the port number on the pod.
	Addresses []string `json:"addresses,omitempty"`
	PodPort   int32    `json:"podPort,omitempty"`
}

// Reason is an entry of the slices' reasons annotation, or the plugin's
// own finding for a pod no slice holds.
type Reason struct {
	Reason string `json:"reason"`
	// Probe is the index in spec.healthcheck.probes; ProbeName describes
	// it ("HTTP probe on 8080").
	Probe     *int32       `json:"probe,omitempty"`
	ProbeName string       `json:"probeName,omitempty"`
	Message   string       `json:"message"`
	Since     *metav1.Time `json:"since,omitempty"`
}

// NodeStatus says whether a node and its agent are up.
type NodeStatus struct {
	Name string `json:"name"`
	// Ready is "True", "False", "Unknown", or why it could not be read.
	Ready string `json:"ready"`
	// Agent is the agent pod of the node; "" when there is none.
	Agent      string `json:"agent,omitempty"`
	AgentReady bool   `json:"agentReady"`
	// AgentState is "ready", "not-ready", "absent", or "unknown" when
	// the agent pods could not be found (see the note).
	AgentState string `json:"agentState"`
	// Note says what it means for traffic, when something is wrong.
	Note string `json:"note,omitempty"`
}

// Reasons the plugin finds itself, besides those of the slices' reasons
// annotation (swhv1alpha1.EndpointReason). They are never stored: the
// plugin computes them from what it reads.
const (
	// ReasonNotPublished: a selected pod that no slice of the port holds.
	ReasonNotPublished = "not-published"
	// ReasonUnknown: a pod published not ready whose slice records no
	// reason.
	ReasonUnknown = "unknown"
)

// BuildStatus turns a snapshot into the status report.
func BuildStatus(s *Snapshot) Status {
	st := Status{Namespace: s.Resource.Namespace, Name: s.Resource.Name, Pods: len(s.Pods), Ports: []PortStatus{}, Nodes: []NodeStatus{}}
	nodes := map[string]NodeStatus{}
	for i := range s.Pods {
		if n := s.Pods[i].Spec.NodeName; n != "" {
			nodes[n] = s.nodeStatus(n)
		}
	}
	probeNames := probeNames(s.Resource)
	readyEverywhere := map[string]bool{}
	for i := range s.Pods {
		readyEverywhere[s.Pods[i].Name] = true
	}
	for _, port := range s.ports() {
		ps := PortStatus{Name: port.Name, Port: port.Port, Endpoints: []EndpointStatus{}, Exclusive: s.Resource.Spec.IsExclusive(port.Name)}
		for _, ported := range s.Resource.Status.Ports {
			if ps.Exclusive && ported.Name == port.Name && ported.Holder != "" {
				ps.Holder = ported.Holder + " on node " + ported.HolderNode
			}
		}
		for i := range s.Pods {
			pod := &s.Pods[i]
			ep := s.endpoint(pod, port.Name, probeNames)
			ep.Stale = ep.Published && agentDown(nodes[pod.Spec.NodeName].AgentState)
			if s.receives(ep) {
				ps.Ready++
				if ep.Reason != nil && keptDespiteProbes(ep.Reason.Reason) {
					ps.Kept++
				}
			} else {
				readyEverywhere[pod.Name] = false
			}
			ps.Endpoints = append(ps.Endpoints, ep)
		}
		st.Ports = append(st.Ports, ps)
	}
	for _, ready := range readyEverywhere {
		if ready {
			st.ReadyPods++
		}
	}
	for _, name := range sortedKeys(nodes) {
		st.Nodes = append(st.Nodes, nodes[name])
	}
	st.Summary = summary(&st)
	if s.Service != nil && s.Service.Spec.PublishNotReadyAddresses {
		st.Summary += "; the Service publishes not-ready addresses: counted as ready are the pods serving"
	}
	if s.AgentsError != nil {
		st.Summary += "; agents unknown: " + s.AgentsError.Error()
	}
	return st
}

// receives reports whether an endpoint gets new traffic: ready, or, when
// the Service publishes not-ready addresses (every endpoint ready),
// serving and not terminating.
func (s *Snapshot) receives(ep EndpointStatus) bool {
	if s.Service != nil && s.Service.Spec.PublishNotReadyAddresses {
		return ep.Serving && !ep.Terminating
	}
	return ep.Ready
}

// keptDespiteProbes reports whether a ready endpoint's reason says it
// fails its probes and is kept published.
func keptDespiteProbes(reason string) bool {
	return reason == swhv1alpha1.ReasonFailStatic || swhv1alpha1.KeptByFloor(reason)
}

func agentDown(state string) bool { return state == agentNotReady || state == agentAbsent }

func summary(st *Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s: %d of %d pods ready on every port", st.Namespace, st.Name, st.ReadyPods, st.Pods)
	var ports []string
	for _, p := range st.Ports {
		port := fmt.Sprintf("%s %d/%d", portLabel(p.Name, p.Port), p.Ready, len(p.Endpoints))
		if p.Kept > 0 {
			port += fmt.Sprintf(" with %d kept despite their probes", p.Kept)
		}
		ports = append(ports, port)
	}
	if len(ports) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(ports, ", "))
	}
	var down []string
	for _, n := range st.Nodes {
		if n.Note != "" {
			down = append(down, n.Name)
		}
	}
	if len(down) > 0 {
		fmt.Fprintf(&b, "; nodes with a problem: %s", strings.Join(down, ", "))
	}
	return b.String()
}

// ports are the child Service's ports, or the spec's before it exists.
func (s *Snapshot) ports() []corev1.ServicePort {
	if s.Service != nil {
		return s.Service.Spec.Ports
	}
	out := make([]corev1.ServicePort, len(s.Resource.Spec.Ports))
	for i, p := range s.Resource.Spec.Ports {
		out[i] = corev1.ServicePort{Name: p.Name, Port: p.Port, TargetPort: p.TargetPort, Protocol: p.Protocol}
	}
	return out
}

// endpoint finds pod on port in the agents' slices, as endpoints.Read
// reads them (ready and serving when every address family's entry is),
// with its reason.
func (s *Snapshot) endpoint(pod *corev1.Pod, port string, probeNames []string) EndpointStatus {
	ep := EndpointStatus{Pod: pod.Name, Node: pod.Spec.NodeName, Ready: true, Serving: true}
	for _, p := range s.publishedEndpoints() {
		if p.Port != port || p.Pod == nil || p.Pod.Name != pod.Name || (p.Pod.UID != "" && p.Pod.UID != pod.UID) {
			continue
		}
		ep.Published = true
		ep.Addresses = append(ep.Addresses, p.Addresses...)
		if p.PortNumber != 0 {
			ep.PodPort = p.PortNumber
		}
		ep.Ready = ep.Ready && p.Ready
		ep.Serving = ep.Serving && p.Serving
		ep.Terminating = ep.Terminating || p.Terminating
	}
	if !ep.Published {
		ep.Ready, ep.Serving = false, false
		ep.Reason = &Reason{Reason: ReasonNotPublished, Message: s.notPublished(pod, port)}
		return ep
	}
	ep.Reason = s.reason(pod, port, probeNames)
	if ep.Reason == nil && !s.receives(ep) {
		ep.Reason = &Reason{Reason: ReasonUnknown, Message: "the slice records no reason (written by an agent older than the reasons annotation, or left out of a slice of many failing endpoints)"}
	}
	return ep
}

// publishedEndpoints reads the slices once per snapshot.
func (s *Snapshot) publishedEndpoints() []endpoints.Published {
	if s.published == nil {
		// The default options are valid: no error.
		s.published, _ = endpoints.Read(s.Slices, endpoints.Options{})
	}
	return s.published
}

// reason is the entry for pod in the reasons annotations of the slices of
// port that the pod's node's agent writes: another node's slice may name a
// previous pod of that name (a StatefulSet's pod moved off a dead node).
func (s *Snapshot) reason(pod *corev1.Pod, port string, probeNames []string) *Reason {
	nodeLabel := endpoints.NodeLabelValue(pod.Spec.NodeName)
	for i := range s.Slices {
		sl := &s.Slices[i]
		if name, _ := endpoints.SlicePort(sl); name != port || !endpoints.ManagedBy(sl, endpoints.Options{}) ||
			sl.Labels[endpoints.DefaultNodeLabel] != nodeLabel {
			continue
		}
		if reasons, err := swhv1alpha1.EndpointReasonsOf(sl.Annotations); err == nil {
			if r, ok := reasons[pod.Name]; ok {
				return reasonFrom(r, probeNames)
			}
		}
	}
	return nil
}

// notPublished says why no slice of a port holds the pod.
func (s *Snapshot) notPublished(pod *corev1.Pod, port string) string {
	switch {
	case pod.Spec.NodeName == "":
		return "the pod is not scheduled on a node yet"
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return fmt.Sprintf("the pod has finished (%s)", pod.Status.Phase)
	case pod.Status.PodIP == "":
		return "the pod has no IP address yet"
	case s.Service == nil:
		return "the child Service does not exist yet: the controller creates it, then the agents publish"
	}
	for _, p := range s.ports() {
		if p.Name == port && p.TargetPort.StrVal != "" && !podHasPort(pod, p.TargetPort.StrVal) {
			return fmt.Sprintf("the port's targetPort %q names no port of the pod", p.TargetPort.StrVal)
		}
	}
	if agentDown(s.agentState(pod.Spec.NodeName)) {
		return fmt.Sprintf("the agent of node %s is not running, so nothing publishes the pod", pod.Spec.NodeName)
	}
	return fmt.Sprintf("the agent of node %s has not published it yet", pod.Spec.NodeName)
}

func (s *Snapshot) nodeStatus(name string) NodeStatus {
	ns := NodeStatus{Name: name, Ready: "no Ready condition", AgentState: s.agentState(name)}
	if err := s.NodeErrors[name]; err != nil {
		ns.Ready = "unreadable: " + err.Error()
	} else if n := s.Nodes[name]; n != nil {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ns.Ready = string(c.Status)
			}
		}
	}
	if a := s.Agents[name]; a != nil {
		ns.Agent, ns.AgentReady = a.Name, endpoints.PodReady(a)
	}
	switch {
	case s.AgentsError != nil:
		// Said once, in the summary.
	case ns.Agent == "":
		ns.Note = "no agent pod on this node: its pods are published by nobody, and what was published stays"
	case !ns.AgentReady:
		ns.Note = fmt.Sprintf("agent %s is not ready: its pods' endpoints are frozen as last published", ns.Agent)
	case ns.Ready == "False" || ns.Ready == "Unknown":
		ns.Note = "the node is not Ready: its endpoints are withdrawn (not serving)"
	}
	return ns
}

func reasonFrom(r swhv1alpha1.EndpointReason, probeNames []string) *Reason {
	out := &Reason{Reason: r.Reason, Probe: r.Probe, Message: r.Message}
	if !r.Since.IsZero() {
		since := r.Since
		out.Since = &since
	}
	if r.Probe != nil && *r.Probe >= 0 && int(*r.Probe) < len(probeNames) {
		out.ProbeName = probeNames[*r.Probe]
	}
	return out
}

// probeNames describe each probe as the agent does: "HTTP probe on 8080".
func probeNames(r *swhv1alpha1.ServiceWithHealthchecks) []string {
	if r.Spec.Healthcheck == nil {
		return nil
	}
	out := make([]string, len(r.Spec.Healthcheck.Probes))
	for i := range r.Spec.Healthcheck.Probes {
		out[i] = r.Spec.Healthcheck.Probes[i].Describe()
	}
	return out
}

func podHasPort(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// portLabel names a port in the report: "port web", "port 80".
func portLabel(name string, number int32) string { return "port " + endpoints.PortLabel(name, number) }

// age renders how long ago t was, like kubectl's AGE column.
func age(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return humanDuration(now.Sub(t.Time))
}
