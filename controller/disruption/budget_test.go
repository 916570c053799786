package disruption

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func resource(b swhv1alpha1.DisruptionBudget, reservations ...swhv1alpha1.DisruptionReservation) *swhv1alpha1.ServiceWithHealthchecks {
	swh := &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kafka", Name: "brokers", Generation: 3},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:            []swhv1alpha1.ServicePort{{Name: "client", Port: 9092}, {Name: "metrics", Port: 9404}},
			Selector:         map[string]string{"app": "kafka"},
			DisruptionBudget: &b,
		},
	}
	if len(reservations) > 0 {
		swh.Status.Disruption = &swhv1alpha1.DisruptionStatus{Reservations: reservations}
	}
	return swh
}

func broker(name, node string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kafka", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// slice publishes pods on one port, ready as given, each in its node's
// agent slice; b-N is on node nN.
func slice(port string, ready map[string]bool) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for name, r := range ready {
		node := "n" + name[len(name)-1:]
		out = append(out, agentSlice(port, node, endpointOf(name, node, r, r, false)))
	}
	return out
}

type livenessFunc func(string) string

func (f livenessFunc) NodeProblem(n string) string { return f(n) }

func TestEvaluate(t *testing.T) {
	maxOne := swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}}
	three := []corev1.Pod{broker("b-0", "n0"), broker("b-1", "n1"), broker("b-2", "n2")}
	allReady := slice("client", map[string]bool{"b-0": true, "b-1": true, "b-2": true})
	tests := []struct {
		name        string
		swh         *swhv1alpha1.ServiceWithHealthchecks
		pods        []corev1.Pod
		slices      []discoveryv1.EndpointSlice
		expected    int32
		liveness    Liveness
		healthy     int32
		desired     int32
		allowed     int32
		unavailable []string
	}{
		{name: "all pass", swh: resource(maxOne), pods: three, slices: allReady, expected: 3, healthy: 3, desired: 2, allowed: 1},
		{name: "Ready but not passing counts as unavailable", swh: resource(maxOne), pods: three,
			slices:   slice("client", map[string]bool{"b-0": false, "b-1": true, "b-2": true}),
			expected: 3, healthy: 2, desired: 2, allowed: 0, unavailable: []string{"b-0: not ready on port client"}},
		{name: "only the budget's ports count", swh: resource(maxOne), pods: three,
			slices:   slices.Concat(allReady, slice("metrics", map[string]bool{"b-0": false})),
			expected: 3, healthy: 3, desired: 2, allowed: 1},
		{name: "every port without ports", swh: resource(swhv1alpha1.DisruptionBudget{MinAvailable: ptr.To(intstr.FromInt32(2))}), pods: three,
			slices:   slices.Concat(allReady, slice("metrics", map[string]bool{"b-0": false, "b-1": true, "b-2": true})),
			expected: 3, healthy: 2, desired: 2, allowed: 0, unavailable: []string{"b-0: not ready on port metrics"}},
		{name: "unpublished pod", swh: resource(maxOne), pods: append(three[:2:2], broker("b-3", "n2")), slices: allReady,
			expected: 3, healthy: 2, desired: 2, unavailable: []string{"b-3: not ready on port client"}},
		{name: "a gone member still counts as expected", swh: resource(maxOne), pods: three[:2], slices: allReady,
			expected: 3, healthy: 2, desired: 2},
		{name: "reserved pod does not count", swh: resource(maxOne, swhv1alpha1.DisruptionReservation{Pod: "b-1", UID: "uid-b-1", Time: metav1.NewTime(now.Add(-time.Minute))}),
			pods: three, slices: allReady, expected: 3, healthy: 2, desired: 2, unavailable: []string{"b-1: its eviction was allowed"}},
		{name: "expired reservation is dropped", swh: resource(maxOne, swhv1alpha1.DisruptionReservation{Pod: "b-1", UID: "uid-b-1", Time: metav1.NewTime(now.Add(-3 * time.Minute))}),
			pods: three, slices: allReady, expected: 3, healthy: 3, desired: 2, allowed: 1},
		{name: "reservation of a replaced pod is dropped", swh: resource(maxOne, swhv1alpha1.DisruptionReservation{Pod: "b-1", UID: "old", Time: metav1.NewTime(now)}),
			pods: three, slices: allReady, expected: 3, healthy: 3, desired: 2, allowed: 1},
		{name: "node not Ready", swh: resource(maxOne), pods: three, slices: allReady, expected: 3,
			liveness: livenessFunc(func(n string) string {
				if n == "n2" {
					return "node n2 is not Ready"
				}
				return ""
			}), healthy: 2, desired: 2, unavailable: []string{"b-2: node n2 is not Ready"}},
		{name: "an endpoint of the pod's previous node does not count", swh: resource(maxOne),
			pods: []corev1.Pod{broker("b-0", "n0"), broker("b-1", "n1"), broker("b-2", "n7")}, slices: allReady,
			expected: 3, healthy: 2, desired: 2, unavailable: []string{"b-2: not ready on port client"}},
		{name: "percentages round up", swh: resource(swhv1alpha1.DisruptionBudget{MinAvailable: ptr.To(intstr.FromString("50%")), Ports: []string{"client"}}),
			pods: three, slices: allReady, expected: 3, healthy: 3, desired: 2, allowed: 1},
		{name: "maxUnavailable percent", swh: resource(swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromString("10%")), Ports: []string{"client"}}),
			pods: three, slices: allReady, expected: 3, healthy: 3, desired: 2, allowed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := Evaluate(Inputs{Resource: tt.swh, Pods: tt.pods, Slices: tt.slices, Expected: tt.expected, Liveness: tt.liveness, Now: now})
			if ev.Healthy != tt.healthy || ev.Desired != tt.desired || ev.Allowed != tt.allowed {
				t.Errorf("healthy/desired/allowed = %d/%d/%d, want %d/%d/%d", ev.Healthy, ev.Desired, ev.Allowed, tt.healthy, tt.desired, tt.allowed)
			}
			var got []string
			for _, u := range ev.Unavailable {
				got = append(got, u.Pod+": "+u.Reason)
			}
			if len(got) != len(tt.unavailable) {
				t.Fatalf("unavailable = %q, want %q", got, tt.unavailable)
			}
			for i := range got {
				if got[i] != tt.unavailable[i] {
					t.Errorf("unavailable[%d] = %q, want %q", i, got[i], tt.unavailable[i])
				}
			}
		})
	}
}

func TestJudge(t *testing.T) {
	ifHealthy := swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	always := swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow)}
	pod := broker("b-0", "n0")
	tests := []struct {
		name   string
		budget swhv1alpha1.DisruptionBudget
		ev     Evaluation
		want   verdict
	}{
		{"healthy pod, one allowed", ifHealthy, Evaluation{Available: map[types.UID]bool{pod.UID: true}, Healthy: 3, Desired: 2, Allowed: 1}, verdictReserve},
		{"healthy pod, none allowed", ifHealthy, Evaluation{Available: map[types.UID]bool{pod.UID: true}, Healthy: 2, Desired: 2}, verdictDeny},
		{"unhealthy pod while the budget holds", ifHealthy, Evaluation{Available: map[types.UID]bool{}, Healthy: 2, Desired: 2}, verdictUnhealthy},
		{"unhealthy pod while the budget is broken", ifHealthy, Evaluation{Available: map[types.UID]bool{}, Healthy: 1, Desired: 2}, verdictDeny},
		{"unhealthy pod, AlwaysAllow", always, Evaluation{Available: map[types.UID]bool{}, Healthy: 1, Desired: 2}, verdictUnhealthy},
		{"unhealthy pod, nothing desired, none healthy", ifHealthy, Evaluation{Available: map[types.UID]bool{}}, verdictDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judge(resource(tt.budget), &pod, tt.ev); got != tt.want {
				t.Errorf("judge = %v, want %v", got, tt.want)
			}
		})
	}
}
