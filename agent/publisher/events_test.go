package publisher

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

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
	running := &corev1.Pod{}
	deleting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		gate    endpoints.PortGate
		passing endpoints.ProbeSet
		last    []probes.Result
		want    string
	}{
		{"unresolved port", running, endpoints.PortGate{Probes: both}, 0, nil, "the port's targetPort names no port of the pod"},
		{"no probe gates the port", running, endpoints.PortGate{Port: 80}, 0, []probes.Result{{}, {}}, "no probe checks this port and the pod is not Ready"},
		{"the failing gating probe", running, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{failed, succeeded},
			"HTTP probe on 8081: http-status: answered 503"},
		{"a failure of a probe not gating the port is not the reason", running, endpoints.PortGate{Port: 80, Probes: endpoints.ProbeSet(0).With(1)}, 0, []probes.Result{failed, {}},
			"TCP probe on 2525 has no result yet"},
		{"recovering", running, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{succeeded, succeeded},
			"HTTP probe on 8081 passes again, not yet successThreshold times"},
		{"terminating but passing", deleting, endpoints.PortGate{Port: 80, Probes: both}, both, []probes.Result{succeeded, succeeded},
			"the pod is terminating; it serves while its probes pass"},
		{"terminating and failing", deleting, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{failed, succeeded},
			"HTTP probe on 8081: http-status: answered 503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := explainNotReady(tt.pod, tt.gate, tt.passing, tt.last, labels); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNotReadyClauses(t *testing.T) {
	tests := []struct {
		name  string
		ports []string
		why   map[string]string
		want  string
	}{
		{"one port", []string{"web"}, map[string]string{"web": "timeout"}, `port "web" (timeout)`},
		{"unnamed port", []string{""}, map[string]string{"": "refused"}, `port "" (refused)`},
		{"same reason grouped", []string{"grpc", "api"}, map[string]string{"api": "x", "grpc": "x"}, `ports "api", "grpc" (x)`},
		{"different reasons", []string{"c", "a", "b"}, map[string]string{"a": "x", "b": "y", "c": "x"}, `ports "a", "c" (x); port "b" (y)`},
		{"no reason known", []string{"a"}, nil, `port "a" (not passing)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := notReadyClauses(tt.ports, tt.why); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestEventNoteFitsTheAPILimit(t *testing.T) {
	ports := make([]string, 12)
	why := map[string]string{}
	for i := range ports {
		ports[i] = fmt.Sprintf("port-%02d", i)
		why[ports[i]] = fmt.Sprintf("TCP probe on %d: refused: dial tcp 10.244.1.5:%d: connect: connection refused — ünïcode", 8000+i, 8000+i)
	}
	long := "pod p on node n is not ready on " + notReadyClauses(ports, why)
	tests := []struct {
		name string
		note string
		cut  bool
	}{
		{"short notes stay as they are", "pod p on node n is ready on port \"web\"", false},
		{"exactly the limit", strings.Repeat("x", maxNoteBytes), false},
		{"twelve ports with their own reasons", long, true},
		{"multi-byte runes at the limit", strings.Repeat("é", maxNoteBytes), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := eventNote(tt.note)
			if len(got) > maxNoteBytes || !utf8.ValidString(got) {
				t.Fatalf("%d bytes, valid UTF-8 %t", len(got), utf8.ValidString(got))
			}
			if cut := got != tt.note; cut != tt.cut {
				t.Errorf("cut %t, want %t (input %d bytes)", cut, tt.cut, len(tt.note))
			}
			if tt.cut && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(tt.note, strings.TrimSuffix(got, "…"))) {
				t.Errorf("not a marked prefix: %q", got[len(got)-20:])
			}
		})
	}
}
