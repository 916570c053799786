package kubectlswh

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

func testPod(name, uid string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func testSlice(family discoveryv1.AddressType, managedBy, pod, uid string, ready, serving bool, annotations map[string]string) discoveryv1.EndpointSlice {
	port, node := "web", "node-1"
	return discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-" + string(family) + "-" + managedBy, Annotations: annotations,
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: managedBy, endpoints.DefaultNodeLabel: node}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID(uid)}}},
	}
}

// TestBuildStatus: what the report says of one pod on one port, from the
// slices, the Service and the agent pods.
func TestBuildStatus(t *testing.T) {
	ours := endpoints.DefaultManagedBy
	failing := map[string]string{swhv1alpha1.AnnotationEndpointReasons: `{"web-a":{"reason":"timeout","probe":-1,"message":"m","since":"2026-12-03T12:00:00Z"}}`}
	readyAgent := testPod("swh-agent-x", "agent")
	for _, tc := range []struct {
		name        string
		pnra        bool
		slices      []discoveryv1.EndpointSlice
		agents      []corev1.Pod
		agentsErr   error
		wantState   string // stateColumn
		wantReason  string
		wantCounted int // ready on the port
		summary     string
	}{
		{"ready", false, []discoveryv1.EndpointSlice{testSlice("IPv4", ours, "web-a", "uid-a", true, true, nil)},
			[]corev1.Pod{readyAgent}, nil, "ready", "", 1, "1 of 1 pods ready"},
		{"not ready with its reason (a negative probe index is ignored)", false, []discoveryv1.EndpointSlice{testSlice("IPv4", ours, "web-a", "uid-a", false, false, failing)},
			[]corev1.Pod{readyAgent}, nil, "not ready", "timeout", 0, "0 of 1 pods ready"},
		{"dual-stack: ready only when both families are", false, []discoveryv1.EndpointSlice{
			testSlice("IPv4", ours, "web-a", "uid-a", true, true, nil), testSlice("IPv6", ours, "web-a", "uid-a", false, false, failing)},
			[]corev1.Pod{readyAgent}, nil, "not ready", "timeout", 0, ""},
		{"the built-in controller's slice is not the agents'", false, []discoveryv1.EndpointSlice{testSlice("IPv4", "endpointslice-controller.k8s.io", "web-a", "uid-a", true, true, nil)},
			[]corev1.Pod{readyAgent}, nil, "not published", ReasonNotPublished, 0, ""},
		{"an endpoint of an earlier pod of the same name", false, []discoveryv1.EndpointSlice{testSlice("IPv4", ours, "web-a", "uid-old", true, true, nil)},
			[]corev1.Pod{readyAgent}, nil, "not published", ReasonNotPublished, 0, ""},
		// A StatefulSet pod moved off a dead node: that node's withdrawn
		// slice still holds the previous pod of the name and its reason.
		{"another node's slice says nothing of the pod", false, []discoveryv1.EndpointSlice{
			testSlice("IPv4", ours, "web-a", "uid-a", true, true, nil),
			func() discoveryv1.EndpointSlice {
				sl := testSlice("IPv4", ours, "web-a", "uid-old", false, false, failing)
				sl.Name, sl.Labels[endpoints.DefaultNodeLabel] = "web-node-2", "node-2"
				node := "node-2"
				sl.Endpoints[0].NodeName = &node
				return sl
			}()},
			[]corev1.Pod{readyAgent}, nil, "ready", "", 1, "1 of 1 pods ready"},
		{"ready, kept by the port's floor: counted, and said so", false, []discoveryv1.EndpointSlice{testSlice("IPv4", ours, "web-a", "uid-a", true, true,
			map[string]string{swhv1alpha1.AnnotationEndpointReasons: `{"web-a":{"reason":"floor-open","message":"the port's floor is open: 0 of 1 pods pass","since":"2026-12-03T12:00:00Z"}}`})},
			[]corev1.Pod{readyAgent}, nil, "ready", swhv1alpha1.ReasonFloorOpen, 1, "1 of 1 pods ready on every port (port web 1/1 with 1 kept despite their probes)"},
		{"publishNotReadyAddresses: counted when serving", true, []discoveryv1.EndpointSlice{testSlice("IPv4", ours, "web-a", "uid-a", true, false, failing)},
			[]corev1.Pod{readyAgent}, nil, "ready,not serving", "timeout", 0, "counted as ready are the pods serving"},
		{"no agent on the node: stale", false, []discoveryv1.EndpointSlice{testSlice("IPv4", ours, "web-a", "uid-a", true, true, nil)},
			[]corev1.Pod{func() corev1.Pod { p := readyAgent; p.Spec.NodeName = "node-2"; return p }()}, nil, "ready (stale)", "", 1, "nodes with a problem: node-1"},
		{"agents unknown: nothing stale", false, []discoveryv1.EndpointSlice{testSlice("IPv4", ours, "web-a", "uid-a", true, true, nil)},
			nil, errors.New("forbidden"), "ready", "", 1, "agents unknown: forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{
				Resource: &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}},
				Service: &corev1.Service{Spec: corev1.ServiceSpec{PublishNotReadyAddresses: tc.pnra,
					Ports: []corev1.ServicePort{{Name: "web", Port: 80}}}},
				Pods: []corev1.Pod{testPod("web-a", "uid-a")}, Slices: tc.slices,
				Nodes: map[string]*corev1.Node{}, NodeErrors: map[string]error{}, Agents: map[string]*corev1.Pod{}, AgentsError: tc.agentsErr,
			}
			for i := range tc.agents {
				s.Agents[tc.agents[i].Spec.NodeName] = &tc.agents[i]
			}
			st := BuildStatus(s)
			ep := st.Ports[0].Endpoints[0]
			reason := ""
			if ep.Reason != nil {
				reason = ep.Reason.Reason
			}
			if got := stateColumn(ep); got != tc.wantState || reason != tc.wantReason || st.Ports[0].Ready != tc.wantCounted {
				t.Errorf("state %q, reason %q, %d ready; want %q, %q, %d", got, reason, st.Ports[0].Ready, tc.wantState, tc.wantReason, tc.wantCounted)
			}
			if !strings.Contains(st.Summary, tc.summary) {
				t.Errorf("summary %q lacks %q", st.Summary, tc.summary)
			}
		})
	}
}
