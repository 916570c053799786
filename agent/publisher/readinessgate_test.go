package publisher

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

const gateType = corev1.PodConditionType(swhv1alpha1.ReadinessGatePrefix + "web")

func TestDesiredGate(t *testing.T) {
	cond := func(s corev1.ConditionStatus, reason string) *corev1.PodCondition {
		return &corev1.PodCondition{Type: gateType, Status: s, Reason: reason}
	}
	once, continuous := swhv1alpha1.ReadinessGateOnce, swhv1alpha1.ReadinessGateContinuous
	for _, tc := range []struct {
		name    string
		mode    swhv1alpha1.ReadinessGateMode
		current *corev1.PodCondition
		failing []string
		want    string
	}{
		{"once, never written, failing", once, nil, []string{"web"}, "False/ProbesNotPassed: probes not passing on port web"},
		{"once, False, two ports failing", once, cond(corev1.ConditionFalse, swhv1alpha1.ReasonProbesNotPassed), []string{"web", "smtp"}, "False/ProbesNotPassed: probes not passing on ports web, smtp"},
		{"once, passing", once, cond(corev1.ConditionFalse, swhv1alpha1.ReasonProbesNotPassed), nil, "True/ProbesPassedOnce: " + gatePassedOnceMessage},
		{"once, True, failing again", once, cond(corev1.ConditionTrue, swhv1alpha1.ReasonProbesPassedOnce), []string{"web"}, "True/ProbesPassedOnce: " + gatePassedOnceMessage},
		{"once after continuous, True, failing", once, cond(corev1.ConditionTrue, swhv1alpha1.ReasonProbesPassed), []string{"web"}, "True/ProbesPassedOnce: " + gatePassedOnceMessage},
		{"once, Unknown (someone else's), failing", once, cond(corev1.ConditionUnknown, ""), []string{"web"}, "False/ProbesNotPassed: probes not passing on port web"},
		{"continuous, passing", continuous, nil, nil, "True/ProbesPassed: " + gatePassingMessage},
		{"continuous, True, failing", continuous, cond(corev1.ConditionTrue, swhv1alpha1.ReasonProbesPassed), []string{"80"}, "False/ProbesNotPassed: probes not passing on port 80"},
		{"continuous after once, True, failing", continuous, cond(corev1.ConditionTrue, swhv1alpha1.ReasonProbesPassedOnce), []string{"web"}, "False/ProbesNotPassed: probes not passing on port web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := desiredGate(tc.mode, gateType, tc.current, tc.failing)
			if got.Type != gateType || fmt.Sprintf("%s/%s: %s", got.Status, got.Reason, got.Message) != tc.want {
				t.Errorf("got %s %s/%s: %s, want %s", got.Type, got.Status, got.Reason, got.Message, tc.want)
			}
		})
	}
}

func TestGateMode(t *testing.T) {
	for _, tc := range []struct {
		gate *swhv1alpha1.ReadinessGate
		want swhv1alpha1.ReadinessGateMode
	}{
		{nil, swhv1alpha1.ReadinessGateOnce},
		{&swhv1alpha1.ReadinessGate{}, swhv1alpha1.ReadinessGateOnce},
		{&swhv1alpha1.ReadinessGate{Mode: swhv1alpha1.ReadinessGateOnce}, swhv1alpha1.ReadinessGateOnce},
		{&swhv1alpha1.ReadinessGate{Mode: swhv1alpha1.ReadinessGateContinuous}, swhv1alpha1.ReadinessGateContinuous},
	} {
		swh := &swhv1alpha1.ServiceWithHealthchecks{Spec: swhv1alpha1.ServiceWithHealthchecksSpec{ReadinessGate: tc.gate}}
		if got := gateMode(swh); got != tc.want {
			t.Errorf("readinessGate %+v: mode %s, want %s", tc.gate, got, tc.want)
		}
	}
}

// TestGateFailing checks the gate's verdict against the grouping rules: a
// probed port by its probes, an unprobed one by ContainersReady, a port that
// does not resolve on the pod left out unless none resolves.
func TestGateFailing(t *testing.T) {
	ports := []corev1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "smtp", Port: 25, TargetPort: intstr.FromString("smtp")},
		{Name: "metrics", Port: 9100, TargetPort: intstr.FromInt32(9100)},
	}
	// Probe 0 on web, probe 1 on smtp; metrics has none.
	g, err := endpoints.NewGrouping(ports, []intstr.IntOrString{intstr.FromInt32(8080), intstr.FromString("smtp")})
	if err != nil {
		t.Fatal(err)
	}
	withSMTP := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "smtp", ContainerPort: 2525}}}}}}
	withoutSMTP := &corev1.Pod{}
	both := endpoints.ProbeSet(0).With(0).With(1)
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		passing endpoints.ProbeSet
		ready   bool
		want    []string
	}{
		{"all pass, containers ready", withSMTP, both, true, nil},
		{"all probes pass, containers not ready", withSMTP, both, false, []string{"metrics"}},
		{"web fails", withSMTP, endpoints.ProbeSet(0).With(1), true, []string{"web"}},
		{"nothing passes", withSMTP, 0, false, []string{"web", "smtp", "metrics"}},
		{"smtp does not resolve: left out", withoutSMTP, endpoints.ProbeSet(0).With(0), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := gateFailing(g.Gates(tc.pod), ports, tc.passing, tc.ready)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("failing %v, want %v", got, tc.want)
			}
		})
	}
	// No port resolves: the gate stays shut, naming them.
	named := []corev1.ServicePort{{Name: "smtp", Port: 25, TargetPort: intstr.FromString("smtp")}}
	g, err = endpoints.NewGrouping(named, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := gateFailing(g.Gates(withoutSMTP), named, 0, true); fmt.Sprint(got) != "[smtp]" {
		t.Errorf("no port resolves: failing %v, want [smtp]", got)
	}
}

// TestGatePatch checks the patch sets one condition, merged by type, with
// the resourceVersion as a precondition.
func TestGatePatch(t *testing.T) {
	at := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	data, err := gatePatch("42", corev1.PodCondition{Type: gateType, Status: corev1.ConditionFalse,
		Reason: swhv1alpha1.ReasonProbesNotPassed, Message: "m", LastTransitionTime: at})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"resourceVersion":"42"},"status":{"conditions":[{"lastTransitionTime":"2025-01-02T03:04:05Z","message":"m","reason":"ProbesNotPassed","status":"False","type":"probes.network.swh.dev/web"}]}}`
	if string(data) != want {
		t.Errorf("patch\n%s\nwant\n%s", data, want)
	}
	var back map[string]any
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
}

// TestGateMemory checks a write is taken for the pod's condition only while
// the cached pod is the one written.
func TestGateMemory(t *testing.T) {
	var m gateMemory
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "1"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: gateType, Status: corev1.ConditionFalse, Reason: swhv1alpha1.ReasonProbesNotPassed},
	}}}
	if c := m.current(pod, gateType); c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("nothing written: current %+v, want the pod's", c)
	}
	m.record("u", gateType, "1", corev1.PodCondition{Type: gateType, Status: corev1.ConditionTrue})
	if c := m.current(pod, gateType); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("cache not caught up: current %+v, want the written True", c)
	}
	if c := m.current(pod, "other"); c != nil {
		t.Errorf("another type: %+v, want none", c)
	}
	pod.ResourceVersion = "2"
	if c := m.current(pod, gateType); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("cache caught up: current %+v, want the pod's", c)
	}
	if len(m.written) != 0 {
		t.Errorf("%d writes remembered after the cache caught up", len(m.written))
	}
}

func TestGateWriteOutcomes(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{apierrors.NewConflict(pods, "p", errors.New("changed")), "conflict"},
		{apierrors.NewForbidden(pods, "p", errors.New("denied by a ValidatingAdmissionPolicy")), "forbidden"},
		{apierrors.NewInternalError(errors.New("etcd")), "error"},
	} {
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		m.gateWrite("True", tc.err)
		if got := testutil.ToFloat64(m.gateWrites.WithLabelValues("True", tc.want)); got != 1 {
			t.Errorf("error %v: outcome %q counted %v times, want once", tc.err, tc.want, got)
		}
	}
}
