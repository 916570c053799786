package disruption

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// endpointOf is one endpoint of pod name (uid-name) as an agent publishes
// it, with nodeName node.
func endpointOf(name, node string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		NodeName:   ptr.To(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: name, UID: types.UID("uid-" + name)},
	}
}

// agentSlice is the slice of port published by the agent of node.
func agentSlice(port, node string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr.To(port)}}, Endpoints: eps}
	s.Name = "brokers-" + port + "-" + node
	s.Labels = map[string]string{
		discoveryv1.LabelServiceName: "brokers", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
		endpoints.DefaultNodeLabel: endpoints.NodeLabelValue(node),
	}
	return s
}

// TestAvailabilityFollowsTheVerdict: with publishNotReadyAddresses every
// endpoint is published ready, and the probes' verdict is only in serving.
func TestAvailabilityFollowsTheVerdict(t *testing.T) {
	maxOne := swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}}
	pods := []corev1.Pod{broker("b-0", "n0"), broker("b-1", "n1"), broker("b-2", "n2")}
	tests := []struct {
		name                        string
		ready, serving, terminating bool
		nilConditions               bool
		available                   bool
	}{
		// endpoints.Read's rule, the EndpointSlice API's: nil serving is
		// serving, nil terminating is not terminating.
		{name: "conditions left nil", nilConditions: true, available: true},
		{name: "passing", ready: true, serving: true, available: true},
		{name: "failing, published ready (publishNotReadyAddresses)", ready: true, serving: false, available: false},
		{name: "passing and terminating, published ready (publishNotReadyAddresses)", ready: true, serving: true, terminating: true, available: false},
		{name: "failing", ready: false, serving: false, available: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b0 := endpointOf("b-0", "n0", tt.ready, tt.serving, tt.terminating)
			if tt.nilConditions {
				b0.Conditions = discoveryv1.EndpointConditions{}
			}
			slices := []discoveryv1.EndpointSlice{
				agentSlice("client", "n0", b0),
				agentSlice("client", "n1", endpointOf("b-1", "n1", true, true, false)),
				agentSlice("client", "n2", endpointOf("b-2", "n2", true, true, false)),
			}
			ev := Evaluate(Inputs{Resource: resource(maxOne), Pods: pods, Slices: slices, Expected: 3, Now: now})
			if got := ev.Available["uid-b-0"]; got != tt.available {
				t.Errorf("b-0 available = %v, want %v (unavailable: %+v)", got, tt.available, ev.Unavailable)
			}
		})
	}
}

// TestOnlyThePodsNodeDecides: an endpoint published by another node's
// agent neither vouches for nor vetoes a pod, in any order of the slices.
func TestOnlyThePodsNodeDecides(t *testing.T) {
	maxOne := swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}}
	pods := []corev1.Pod{broker("b-0", "n0"), broker("b-1", "n1"), broker("b-2", "n2")}
	own := func(b0ready bool) []discoveryv1.EndpointSlice {
		return []discoveryv1.EndpointSlice{
			agentSlice("client", "n0", endpointOf("b-0", "n0", b0ready, b0ready, false)),
			agentSlice("client", "n1", endpointOf("b-1", "n1", true, true, false)),
			agentSlice("client", "n2", endpointOf("b-2", "n2", true, true, false)),
		}
	}
	// What the policy lets node n9 write: its own slice, its own nodeName,
	// any targetRef.
	hostile := func(ready bool) discoveryv1.EndpointSlice {
		return agentSlice("client", "n9", endpointOf("b-0", "n9", ready, ready, false),
			endpointOf("b-1", "n9", ready, ready, false), endpointOf("b-2", "n9", ready, ready, false))
	}
	// A slice labelled as n9's carrying endpoints named on the pods' nodes.
	mislabelled := func(ready bool) discoveryv1.EndpointSlice {
		return agentSlice("client", "n9", endpointOf("b-0", "n0", ready, ready, false),
			endpointOf("b-1", "n1", ready, ready, false), endpointOf("b-2", "n2", ready, ready, false))
	}
	tests := []struct {
		name    string
		slices  []discoveryv1.EndpointSlice
		healthy int32
	}{
		{"another node publishes them ready", append(own(true), hostile(true)), 3},
		{"another node publishes them ready, first", append([]discoveryv1.EndpointSlice{hostile(true)}, own(true)...), 3},
		{"another node publishes them not ready", append(own(true), hostile(false)), 3},
		{"another node publishes them not ready, first", append([]discoveryv1.EndpointSlice{hostile(false)}, own(true)...), 3},
		{"another node vouches for a failing pod", append(own(false), hostile(true)), 2},
		{"another node vouches for a failing pod, first", append([]discoveryv1.EndpointSlice{hostile(true)}, own(false)...), 2},
		{"another node's slice names the pods' nodes", append(own(false), mislabelled(true)), 2},
		{"another node's slice names the pods' nodes, first", append([]discoveryv1.EndpointSlice{mislabelled(true)}, own(false)...), 2},
		{"only another node publishes them", []discoveryv1.EndpointSlice{hostile(true), mislabelled(true)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := Evaluate(Inputs{Resource: resource(maxOne), Pods: pods, Slices: tt.slices, Expected: 3, Now: now})
			if ev.Healthy != tt.healthy {
				t.Errorf("healthy = %d, want %d; unavailable %+v", ev.Healthy, tt.healthy, ev.Unavailable)
			}
		})
	}
}

// TestEveryOwnEndpointMustPass: the pod's own node publishing it twice
// (two address families) counts it only when both pass.
func TestEveryOwnEndpointMustPass(t *testing.T) {
	maxOne := swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}}
	pods := []corev1.Pod{broker("b-0", "n0")}
	for _, order := range [][2]bool{{true, false}, {false, true}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			slices := []discoveryv1.EndpointSlice{
				agentSlice("client", "n0", endpointOf("b-0", "n0", order[0], order[0], false)),
				agentSlice("client", "n0", endpointOf("b-0", "n0", order[1], order[1], false)),
			}
			if ev := Evaluate(Inputs{Resource: resource(maxOne), Pods: pods, Slices: slices, Expected: 1, Now: now}); ev.Healthy != 0 {
				t.Errorf("healthy = %d, want 0", ev.Healthy)
			}
		})
	}
}
