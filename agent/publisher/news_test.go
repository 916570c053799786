package publisher

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// TestEndpointNews: what is news between the slices before and after a
// reconcile, for one pod on one port.
func TestEndpointNews(t *testing.T) {
	key := podPort{uid: "u1", port: "web"}
	pod, port := podRef{"u1", "web-1"}, portRef{name: "web"}
	reason := func(code string) *swhv1alpha1.EndpointReason {
		c := causeOf(causeFailure, code, code)
		r := reasonOf(c, metav1.Time{})
		return &r
	}
	state := func(ready bool, annotated string) map[podPort]endpointState {
		st := endpointState{pod: pod, port: port, ready: ready}
		if annotated != "" {
			st.reason = reason(annotated)
		}
		return map[podPort]endpointState{key: st}
	}
	ready := state(true, "")
	why := func(kind causeKind, code string) notReadyReasons {
		r := notReadyReasons{}
		r.set("u1", "web", causeOf(kind, code, code))
		return r
	}
	failing := func(code string) notReadyReasons { return why(causeFailure, code) }
	tests := []struct {
		name          string
		before, after map[podPort]endpointState
		why           notReadyReasons
		want          string
	}{
		{"a new pod waits for its first result: no news", nil, state(false, "pending@0"), why(causeStart, "pending@0"), ""},
		{"a new pod not Ready yet on a port no probe checks: no news", nil, state(false, codePodNotReady), failing(codePodNotReady), ""},
		{"a new pod that terminates: no news", nil, state(false, "terminating"), why(causeTerminating, "terminating"), ""},
		{"a new pod fails at once", nil, state(false, "refused@0"), failing("refused@0"), "Warning web=refused@0"},
		{"a new pod ready", nil, ready, nil, "Ready web"},
		{"its first result is a failure", state(false, "pending@0"), state(false, "http-status@0"), failing("http-status@0"), "Warning web=http-status@0"},
		{"the same failure again", state(false, "http-status@0"), state(false, "http-status@0"), failing("http-status@0"), ""},
		{"another failure", state(false, "http-status@0"), state(false, "refused@0"), failing("refused@0"), "Warning web=refused@0"},
		{"the same failure of another probe", state(false, "refused@0"), state(false, "refused@1"), failing("refused@1"), "Warning web=refused@1"},
		{"passing again, not yet enough: no news", state(false, "refused@0"), state(false, "refused@0"), why(causeStart, "recovering@0"), ""},
		{"becomes ready", state(false, "refused@0"), ready, nil, "Ready web"},
		{"stays ready", ready, ready, nil, ""},
		{"becomes not ready", ready, state(false, "timeout@0"), failing("timeout@0"), "Warning web=timeout@0"},
		{"a probe added: not ready for want of a result", ready, state(false, "pending@1"), why(causeStart, "pending@1"), "Normal web=pending@1"},
		{"deleted while passing", ready, state(false, "terminating"), why(causeTerminating, "terminating"), "Normal web=terminating"},
		{"terminating, then failing", state(false, "terminating"), state(false, "refused@0"), failing("refused@0"), "Warning web=refused@0"},
		{"no reason known: not passing", ready, state(false, ""), nil, "Warning web=not-passing"},
		{"entries dropped by the annotation's bound: no news", state(false, ""), state(false, ""), failing("refused@0"), ""},
		{"an entry dropped by the bound: no news", state(false, "refused@0"), state(false, ""), failing("refused@0"), ""},
		{"an entry back within the bound: no news", state(false, ""), state(false, "refused@0"), failing("refused@0"), ""},
		{"gone", ready, nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, n := range endpointNews(tt.before, tt.after, tt.why) {
				if n.pod != pod {
					t.Errorf("news of pod %v", n.pod)
				}
				for _, p := range n.ready {
					got = append(got, "Ready "+p.id())
				}
				for _, pc := range n.notReady {
					kind := "Normal"
					if n.warning() {
						kind = "Warning"
					}
					got = append(got, kind+" "+pc.port.id()+"="+pc.why.code())
				}
			}
			if s := strings.Join(got, "; "); s != tt.want {
				t.Errorf("news %q, want %q", s, tt.want)
			}
		})
	}
}

// TestPublishedStates: the slices' endpoints by pod and port, with their
// annotated reasons; a dual-stack pod is ready when both families are.
func TestPublishedStates(t *testing.T) {
	node := "node-a"
	slice := func(name, port string, family discoveryv1.AddressType, ready map[string]bool, reasons swhv1alpha1.EndpointReasons) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web",
				discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: node}},
			AddressType: family, Ports: []discoveryv1.EndpointPort{{Name: &port}},
		}
		for pod, r := range ready {
			addr := "10.0.0.1"
			if family == discoveryv1.AddressTypeIPv6 {
				addr = "fd00::1"
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: &node,
				Conditions: discoveryv1.EndpointConditions{Ready: &r}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID("uid-" + pod)}})
		}
		if reasons != nil {
			value, err := reasons.EncodeBounded(swhv1alpha1.MaxEndpointReasonsBytes)
			if err != nil {
				t.Fatal(err)
			}
			s.Annotations = map[string]string{swhv1alpha1.AnnotationEndpointReasons: value}
		}
		return s
	}
	refused := swhv1alpha1.EndpointReasons{"a": reasonOf(causeOf(causeFailure, "refused@0", "refused"), metav1.NewTime(time.Unix(0, 0)))}
	got := publishedStates([]discoveryv1.EndpointSlice{
		slice("web-http-v4", "http", discoveryv1.AddressTypeIPv4, map[string]bool{"a": false, "b": true}, refused),
		slice("web-http-v6", "http", discoveryv1.AddressTypeIPv6, map[string]bool{"b": false}, nil),
	})
	var lines []string
	for _, k := range []podPort{{"uid-a", "http"}, {"uid-b", "http"}} {
		st := got[k]
		r := "-"
		if st.reason != nil {
			r = st.reason.Reason
		}
		lines = append(lines, fmt.Sprintf("%s ready=%t reason=%s", st.pod.name, st.ready, r))
	}
	if want := "a ready=false reason=refused; b ready=false reason=-"; strings.Join(lines, "; ") != want {
		t.Errorf("got %q, want %q", strings.Join(lines, "; "), want)
	}
}
