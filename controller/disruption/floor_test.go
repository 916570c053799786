package disruption

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// TestFloorKeptIsNotAvailable: an endpoint a floor keeps published ready
// although it fails is not available; one kept by fail static is (the
// checker is suspected, not the pod).
func TestFloorKeptIsNotAvailable(t *testing.T) {
	maxOne := swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}}
	pods := []corev1.Pod{broker("b-0", "n0"), broker("b-1", "n1")}
	for _, tc := range []struct {
		reason    string
		available bool
	}{
		{"", true},
		{swhv1alpha1.ReasonFloorOpen, false},
		{swhv1alpha1.ReasonFloorFrozen, false},
		{swhv1alpha1.ReasonFloorHeld, false},
		{swhv1alpha1.ReasonReplicationLagKept, false},
		{swhv1alpha1.ReasonFailStatic, true},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			s0 := agentSlice("client", "n0", endpointOf("b-0", "n0", true, true, false))
			if tc.reason != "" {
				value, err := swhv1alpha1.EndpointReasons{"b-0": {Reason: tc.reason, Message: "m"}}.Encode()
				if err != nil {
					t.Fatal(err)
				}
				s0.Annotations = map[string]string{swhv1alpha1.AnnotationEndpointReasons: value}
			}
			// The same pod name on another node's slice says nothing.
			other := agentSlice("client", "n1", endpointOf("b-1", "n1", true, true, false))
			ev := Evaluate(Inputs{Resource: resource(maxOne), Pods: pods, Slices: []discoveryv1.EndpointSlice{s0, other}, Expected: 2, Now: now})
			if got := ev.Available["uid-b-0"]; got != tc.available {
				t.Errorf("b-0 available = %v, want %v", got, tc.available)
			}
			if !ev.Available["uid-b-1"] {
				t.Error("b-1, kept by no floor, is not available")
			}
		})
	}
}

// TestKeptPodIsNoFreeEviction: a pod a floor keeps serving is not
// available, yet its eviction takes a disruption like any pod's, never
// the free eviction of an unhealthy pod, whatever the policy.
func TestKeptPodIsNoFreeEviction(t *testing.T) {
	always := policyv1.AlwaysAllow
	pod := broker("b-0", "n0")
	for _, tc := range []struct {
		name    string
		policy  *policyv1.UnhealthyPodEvictionPolicyType
		kept    bool
		allowed int32
		want    verdict
	}{
		{name: "unhealthy, AlwaysAllow", policy: &always, want: verdictUnhealthy},
		{name: "kept, AlwaysAllow, nothing allowed", policy: &always, kept: true, want: verdictDeny},
		{name: "kept, IfHealthyBudget met, nothing allowed", kept: true, want: verdictDeny},
		{name: "kept, one allowed", kept: true, allowed: 1, want: verdictReserve},
	} {
		t.Run(tc.name, func(t *testing.T) {
			swh := &swhv1alpha1.ServiceWithHealthchecks{Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
				DisruptionBudget: &swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), UnhealthyPodEvictionPolicy: tc.policy}}}
			ev := Evaluation{Healthy: 2, Desired: 2, Allowed: tc.allowed, Available: map[types.UID]bool{}, Kept: map[types.UID]bool{pod.UID: tc.kept}}
			if got := judge(swh, &pod, ev); got != tc.want {
				t.Errorf("judge = %v, want %v", got, tc.want)
			}
		})
	}
}
