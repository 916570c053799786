package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Sources says where a budget's inputs are read.
type Sources struct {
	// Cache holds the agents' slices, the nodes and, with Agent set, the
	// agent pods (the controller's cache).
	Cache client.Reader
	// APIReader reads the resource, the selected pods and their workloads
	// from the API server: a decision must not rest on a stale resource, and
	// the controller does not cache the cluster's pods.
	APIReader client.Reader
	// Pods lists the selected pods from the API server (the controller
	// does not cache the cluster's pods), trimmed: a StreamingPods. Nil:
	// APIReader lists them whole (tests without an API server).
	Pods PodLister
	// Scales reads the /scale subresource of the pods' controllers, of any
	// kind (the controller's client: its subresource reads go to the API
	// server). Nil: pods with a controller make a budget allow nothing,
	// unless it is an integer minAvailable.
	Scales client.SubResourceClientConstructor
	// Agent is the agents' ServiceAccount: a node's verdicts count only
	// while a Ready pod of that ServiceAccount runs there. Empty, every
	// Ready node's verdicts count (agents outside the cluster, tests).
	Agent types.NamespacedName
	// ReservationTimeout defaults to DefaultReservationTimeout.
	ReservationTimeout time.Duration
}

// read gathers what Evaluate needs for swh, except the reservations, which
// come with swh itself.
func (s *Sources) read(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, now time.Time) (Inputs, error) {
	var lister PodLister = readerPods{s.APIReader}
	if s.Pods != nil {
		lister = s.Pods
	}
	pods, err := lister.SelectedPods(ctx, swh.Namespace, labels.SelectorFromSet(swh.Spec.Selector))
	if err != nil {
		return Inputs{}, fmt.Errorf("listing the pods of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := s.Cache.List(ctx, slices, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
	}); err != nil {
		return Inputs{}, fmt.Errorf("listing the slices of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	expected, problem, err := expectedPods(ctx, s, swh.Spec.DisruptionBudget, pods)
	if err != nil {
		return Inputs{}, err
	}
	live, err := s.liveness(ctx)
	if err != nil {
		return Inputs{}, err
	}
	return Inputs{
		Resource: swh, Pods: pods, Slices: slices.Items, Expected: expected, ExpectedProblem: problem,
		Liveness: live, Now: now, ReservationTimeout: s.ReservationTimeout,
	}, nil
}

// nodeLiveness judges nodes from the cached Nodes and agent pods.
type nodeLiveness struct {
	nodes       map[string]*corev1.Node
	agentReady  map[string]bool
	checkAgents bool
}

func (s *Sources) liveness(ctx context.Context) (*nodeLiveness, error) {
	nodes := &corev1.NodeList{}
	if err := s.Cache.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	l := &nodeLiveness{nodes: make(map[string]*corev1.Node, len(nodes.Items)), agentReady: map[string]bool{}}
	for i := range nodes.Items {
		l.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	if s.Agent.Name == "" {
		return l, nil
	}
	l.checkAgents = true
	agents := &corev1.PodList{}
	if err := s.Cache.List(ctx, agents, client.InNamespace(s.Agent.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the agent pods: %w", err)
	}
	for i := range agents.Items {
		p := &agents.Items[i]
		if p.Spec.ServiceAccountName == s.Agent.Name && p.DeletionTimestamp == nil && endpoints.PodReady(p) {
			l.agentReady[p.Spec.NodeName] = true
		}
	}
	return l, nil
}

// NodeProblem implements Liveness.
func (l *nodeLiveness) NodeProblem(name string) string {
	node := l.nodes[name]
	if node == nil {
		return "node " + name + " is gone"
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		return "node " + name + " is not Ready"
	}
	if l.checkAgents && !l.agentReady[name] {
		return "no live agent on node " + name
	}
	return ""
}
