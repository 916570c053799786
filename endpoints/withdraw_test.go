package endpoints

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeNotReady(t *testing.T) {
	withReady := func(s corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue},
			{Type: corev1.NodeReady, Status: s},
		}}}
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"Ready", withReady(corev1.ConditionTrue), false},
		{"Unknown", withReady(corev1.ConditionUnknown), true},
		{"False", withReady(corev1.ConditionFalse), true},
		{"no Ready condition yet", &corev1.Node{}, false},
		{"nil", nil, false},
	} {
		if got := NodeNotReady(tc.node); got != tc.want {
			t.Errorf("%s: NodeNotReady = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestWithdraw checks that withdrawing built slices gives what Build
// publishes for the same pods failing every probe.
func TestWithdraw(t *testing.T) {
	http := svcPort("http", 80, num(8080))
	dying := testPod("c", []string{"10.0.0.3"}, terminating)
	pods := func(passing bool) []PodVerdicts {
		v := PortVerdict{Port: 8080, Passing: passing}
		return []PodVerdicts{
			{testPod("a", []string{"10.0.0.1"}), verdicts(pass(8080))},
			{testPod("b", []string{"10.0.0.2"}), verdicts(v)},
			{dying, verdicts(v)},
		}
	}
	for _, pnra := range []bool{false, true} {
		svc := testService(http)
		svc.PublishNotReadyAddresses = pnra
		built, err := Build(svc, node1, pods(true), Options{})
		if err != nil {
			t.Fatal(err)
		}
		failing := slices.Clone(pods(false))
		failing[0].Ports = verdicts(fail(8080))
		want, err := Build(svc, node1, failing, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !Withdraw(&built[0], pnra) {
			t.Errorf("publishNotReadyAddresses=%v: Withdraw changed nothing", pnra)
		}
		if !UpToDate(&built[0], &want[0]) {
			t.Errorf("publishNotReadyAddresses=%v: withdrawn %s, want %s", pnra, brief(built[0]), brief(want[0]))
		}
		if Withdraw(&built[0], pnra) {
			t.Errorf("publishNotReadyAddresses=%v: a second Withdraw changed something", pnra)
		}
	}
}
