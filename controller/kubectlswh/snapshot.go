package kubectlswh

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Snapshot is what the plugin reads of one resource, at one time.
type Snapshot struct {
	Resource *swhv1alpha1.ServiceWithHealthchecks
	// Service is the child Service; nil when it does not exist (yet).
	Service *corev1.Service
	// Pods are the pods of the namespace the selector matches, by name.
	Pods []corev1.Pod
	// Slices are the EndpointSlices labelled with the resource's name.
	Slices []discoveryv1.EndpointSlice
	// Nodes are the nodes of the selected pods, by name; a node missing
	// here could not be read (see NodeErrors).
	Nodes map[string]*corev1.Node
	// NodeErrors says why a node could not be read (deleted, or no access
	// to nodes: a namespaced operator).
	NodeErrors map[string]error
	// Agents are the agent pods, by node name.
	Agents map[string]*corev1.Pod
	// AgentsError is why the agent pods are unknown: they could not be
	// listed, or no pod matched at all (a wrong namespace or selector).
	// Nothing is then said stale or unpublished for want of an agent.
	AgentsError error

	// published is what Slices publish, read once (publishedEndpoints).
	published []endpoints.Published
}

// AgentLocation says where the agent pods are.
type AgentLocation struct {
	// Namespace holds the agent DaemonSet's pods.
	Namespace string
	// Selector selects the agent pods.
	Selector labels.Selector
}

// Read takes a snapshot of the resource ns/name.
func Read(ctx context.Context, c client.Reader, ns, name string, agents AgentLocation) (*Snapshot, error) {
	s := &Snapshot{Resource: &swhv1alpha1.ServiceWithHealthchecks{}, Nodes: map[string]*corev1.Node{},
		NodeErrors: map[string]error{}, Agents: map[string]*corev1.Pod{}}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s.Resource); err != nil {
		return nil, fmt.Errorf("reading ServiceWithHealthchecks %s/%s: %w", ns, name, err)
	}
	svc := &corev1.Service{}
	switch err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, svc); {
	case err == nil:
		s.Service = svc
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Service %s/%s: %w", ns, name, err)
	}
	if len(s.Resource.Spec.Selector) > 0 {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(s.Resource.Spec.Selector)); err != nil {
			return nil, fmt.Errorf("listing the pods of %s/%s: %w", ns, name, err)
		}
		s.Pods = pods.Items
		sort.Slice(s.Pods, func(i, j int) bool { return s.Pods[i].Name < s.Pods[j].Name })
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of %s/%s: %w", ns, name, err)
	}
	s.Slices = slices.Items

	// One list when allowed; one read per node of the pods otherwise.
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err == nil {
		for i := range nodes.Items {
			s.Nodes[nodes.Items[i].Name] = &nodes.Items[i]
		}
	}
	for i := range s.Pods {
		node := s.Pods[i].Spec.NodeName
		if node == "" || s.Nodes[node] != nil || s.NodeErrors[node] != nil {
			continue
		}
		n := &corev1.Node{}
		if err := c.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
			s.NodeErrors[node] = err
			continue
		}
		s.Nodes[node] = n
	}
	agentPods := &corev1.PodList{}
	switch err := c.List(ctx, agentPods, client.InNamespace(agents.Namespace), client.MatchingLabelsSelector{Selector: agents.Selector}); {
	case err != nil:
		s.AgentsError = fmt.Errorf("listing the agent pods in namespace %s: %w", agents.Namespace, err)
	case len(agentPods.Items) == 0:
		s.AgentsError = fmt.Errorf("no pod in namespace %s matches {%s} (set --agent-namespace and --agent-selector to the chart's release)", agents.Namespace, agents.Selector)
	}
	for i := range agentPods.Items {
		p := &agentPods.Items[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// Of two (a rollout), the Ready one, else the one not being
		// deleted, tells whether the node has a working agent.
		if old := s.Agents[p.Spec.NodeName]; old == nil || agentRank(p) > agentRank(old) {
			s.Agents[p.Spec.NodeName] = p
		}
	}
	return s, nil
}

func agentRank(p *corev1.Pod) int {
	rank := 0
	if endpoints.PodReady(p) {
		rank += 2
	}
	if p.DeletionTimestamp == nil {
		rank++
	}
	return rank
}

// agentState says whether the agent of a node runs: "ready", "not-ready",
// "absent", or "unknown" when the agent pods are unknown.
func (s *Snapshot) agentState(node string) string {
	switch a := s.Agents[node]; {
	case s.AgentsError != nil:
		return agentUnknown
	case a == nil:
		return agentAbsent
	case endpoints.PodReady(a):
		return agentReady
	}
	return agentNotReady
}

const (
	agentReady    = "ready"
	agentNotReady = "not-ready"
	agentAbsent   = "absent"
	agentUnknown  = "unknown"
)
