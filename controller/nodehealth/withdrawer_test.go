package nodehealth

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func node(conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: conds}}
}

func cond(t corev1.NodeConditionType, s corev1.ConditionStatus, at time.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, LastTransitionTime: metav1.NewTime(at)}
}

func TestReadySince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		node *corev1.Node
		want time.Time
	}{
		{"no conditions", node(), time.Time{}},
		{"no Ready condition", node(cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, t0)), time.Time{}},
		{"Ready among others", node(cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, t0),
			cond(corev1.NodeReady, corev1.ConditionUnknown, t0.Add(time.Minute))), t0.Add(time.Minute)},
		{"Ready without a transition time", node(corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse}), time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := readySince(tt.node); !got.Equal(tt.want) {
				t.Errorf("readySince = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCountServing(t *testing.T) {
	ep := func(serving *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{"10.244.0.1"}, Conditions: discoveryv1.EndpointConditions{Serving: serving}}
	}
	yes, no := true, false
	s := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{ep(&yes), ep(&no), ep(nil), ep(&yes)}}
	// Serving unset means serving, as for consumers of the API.
	if got := countServing(s); got != 3 {
		t.Errorf("countServing = %d, want 3", got)
	}
	if got := countServing(&discoveryv1.EndpointSlice{}); got != 0 {
		t.Errorf("countServing of an empty slice = %d", got)
	}
}

func TestReadinessPredicate(t *testing.T) {
	now := time.Now()
	ready := node(cond(corev1.NodeReady, corev1.ConditionTrue, now))
	unknown := node(cond(corev1.NodeReady, corev1.ConditionUnknown, now))
	notReady := node(cond(corev1.NodeReady, corev1.ConditionFalse, now))
	none := node()
	p := readiness()
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"create Ready", p.Create(event.CreateEvent{Object: ready}), false},
		{"create Unknown", p.Create(event.CreateEvent{Object: unknown}), true},
		{"create with no Ready condition", p.Create(event.CreateEvent{Object: none}), false},
		{"Ready stays Ready (a heartbeat)", p.Update(event.UpdateEvent{ObjectOld: ready, ObjectNew: ready}), false},
		{"Ready to Unknown", p.Update(event.UpdateEvent{ObjectOld: ready, ObjectNew: unknown}), true},
		{"Ready to False", p.Update(event.UpdateEvent{ObjectOld: ready, ObjectNew: notReady}), true},
		{"Unknown to Ready: forget it", p.Update(event.UpdateEvent{ObjectOld: unknown, ObjectNew: ready}), true},
		{"no Ready condition, updated", p.Update(event.UpdateEvent{ObjectOld: none, ObjectNew: none}), false},
		{"delete", p.Delete(event.DeleteEvent{Object: ready}), true},
		{"generic", p.Generic(event.GenericEvent{Object: unknown}), false},
		{"not a Node", p.Create(event.CreateEvent{Object: &corev1.Pod{}}), false},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestFirstWithdrawal(t *testing.T) {
	w := &Withdrawer{}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	steps := []struct {
		name  string
		do    func() bool
		first bool
	}{
		{"first write after the transition", func() bool { return w.firstWithdrawal("a", t0) }, true},
		{"another slice, same period", func() bool { return w.firstWithdrawal("a", t0) }, false},
		{"a late agent write withdrawn again", func() bool { return w.firstWithdrawal("a", t0) }, false},
		{"another node", func() bool { return w.firstWithdrawal("b", t0) }, true},
		{"a new transition (False after Unknown)", func() bool { return w.firstWithdrawal("a", t0.Add(time.Minute)) }, true},
		{"no transition time: never observed", func() bool { return w.firstWithdrawal("c", time.Time{}) }, false},
		{"Ready again, then not Ready in the same second", func() bool {
			w.track("a", false)
			return w.firstWithdrawal("a", t0.Add(time.Minute))
		}, true},
	}
	for _, s := range steps {
		if got := s.do(); got != s.first {
			t.Errorf("%s: first %v, want %v", s.name, got, s.first)
		}
	}
}
