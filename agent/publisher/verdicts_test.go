package publisher

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

func TestExplainNotReady(t *testing.T) {
	labels := []string{"HTTP probe on 8081", "TCP probe on 2525"}
	failed := probes.Result{Status: probes.Failure, Reason: probes.ReasonHTTPStatus, Message: "answered 503"}
	succeeded := probes.Result{Status: probes.Success}
	both := endpoints.ProbeSet(0).With(0).With(1)
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	running := &corev1.Pod{}
	deleting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}}
	deletingReady := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}, Status: corev1.PodStatus{Conditions: ready}}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		gate    endpoints.PortGate
		passing endpoints.ProbeSet
		last    []probes.Result
		want    cause
	}{
		{"unresolved port", running, endpoints.PortGate{Probes: both}, 0, nil,
			causeOf(causeFailure, "no-target-port", "the port's targetPort names no port of the pod")},
		{"no probe gates the port", running, endpoints.PortGate{Port: 80}, 0, []probes.Result{{}, {}},
			causeOf(causeFailure, "pod-not-ready", "no probe checks this port and the pod is not Ready")},
		{"the failing gating probe", running, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{failed, succeeded},
			causeOf(causeFailure, "http-status@0", "HTTP probe on 8081: http-status: answered 503")},
		{"a failure of a probe not gating the port is not the reason", running, endpoints.PortGate{Port: 80, Probes: endpoints.ProbeSet(0).With(1)}, 0, []probes.Result{failed, {}},
			causeOf(causeStart, "pending@1", "TCP probe on 2525 has no result yet")},
		{"recovering", running, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{succeeded, succeeded},
			causeOf(causeStart, "recovering@0", "HTTP probe on 8081 passes again, not yet successThreshold times")},
		{"terminating but passing", deleting, endpoints.PortGate{Port: 80, Probes: both}, both, []probes.Result{succeeded, succeeded},
			causeOf(causeTerminating, "terminating", "the pod is terminating; it serves while its probes pass")},
		{"terminating and failing", deleting, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{failed, succeeded},
			causeOf(causeFailure, "http-status@0", "HTTP probe on 8081: http-status: answered 503")},
		// The port passes on pod readiness: the pod is not "not Ready".
		{"terminating and Ready on a port no probe checks", deletingReady, endpoints.PortGate{Port: 80}, 0, nil,
			causeOf(causeTerminating, "terminating", "the pod is terminating; it serves while it is Ready")},
		{"terminating and not Ready on a port no probe checks", deleting, endpoints.PortGate{Port: 80}, 0, nil,
			causeOf(causeFailure, "pod-not-ready", "no probe checks this port and the pod is not Ready")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := explainNotReady(tt.pod, tt.gate, tt.passing, tt.last, labels); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %s %+v, want %s %+v", got.code(), got, tt.want.code(), tt.want)
			}
		})
	}
}

// causeOf builds a cause from its code as actions show it, "<reason>@<probe
// index>" or the reason alone.
func causeOf(kind causeKind, code, text string) cause {
	if reason, probe, ok := strings.Cut(code, "@"); ok {
		i, err := strconv.Atoi(probe)
		if err != nil {
			panic(err)
		}
		return probeCause(kind, reason, i, text)
	}
	return cause{kind: kind, reason: code, text: text}
}
