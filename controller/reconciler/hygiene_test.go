package reconciler

import (
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

func TestStaleSlices(t *testing.T) {
	// The live Service: what the agents publish. The resource's spec may
	// say otherwise (an apply the API server refused); it is not consulted.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Ports:      []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "metrics", Port: 9090}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}}
	slice := func(name, service, managedBy, node, port string, family discoveryv1.AddressType) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: managedBy, endpoints.DefaultNodeLabel: node}},
			AddressType: family,
			Ports:       []discoveryv1.EndpointPort{{Name: &port}},
		}
	}
	agent := endpoints.DefaultManagedBy
	all := []discoveryv1.EndpointSlice{
		slice("live", "web", agent, "a", "http", discoveryv1.AddressTypeIPv4),
		slice("live-port-not-in-spec", "web", agent, "a", "metrics", discoveryv1.AddressTypeIPv4),
		slice("gone-node", "web", agent, "b", "http", discoveryv1.AddressTypeIPv4),
		slice("gone-port", "web", agent, "a", "admin", discoveryv1.AddressTypeIPv4),
		slice("gone-family", "web", agent, "a", "http", discoveryv1.AddressTypeIPv6),
		slice("foreign-manager", "web", "someone-else", "b", "admin", discoveryv1.AddressTypeIPv6),
		slice("other-service", "api", agent, "b", "admin", discoveryv1.AddressTypeIPv6),
	}
	tests := []struct {
		name       string
		judgePorts bool
		want       []string
	}{
		{"in sync: judged against the live Service", true, []string{"gone-family", "gone-node", "gone-port"}},
		{"apply refused: only gone nodes", false, []string{"gone-node"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stale := staleSlices(svc, all, map[string]bool{"a": true}, tt.judgePorts)
			var got []string
			for s := range stale {
				got = append(got, s.Name)
			}
			sort.Strings(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("stale = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestComputeStatusCountsPodsOnce: a dual-stack pod counts once, and is
// ready on a port only when both its families' entries are (the rule of
// endpoints.Read, which every reader shares).
func TestComputeStatusCountsPodsOnce(t *testing.T) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 3},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{Ports: []swhv1alpha1.ServicePort{{Name: "a", Port: 1}, {Name: "b", Port: 2}}}}
	yes, no := true, false
	ep := func(uid, addr string, ready bool) discoveryv1.Endpoint {
		r := &no
		if ready {
			r = &yes
		}
		node := "n1"
		return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: &node, TargetRef: &corev1.ObjectReference{UID: types.UID(uid)}, Conditions: discoveryv1.EndpointConditions{Ready: r}}
	}
	slice := func(port string, family discoveryv1.AddressType, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: "n1"}},
			Ports:      []discoveryv1.EndpointPort{{Name: &port}}, AddressType: family, Endpoints: eps,
		}
	}
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	tests := []struct {
		name           string
		slices         []discoveryv1.EndpointSlice
		readyA, readyB int32
		ready          string
	}{
		{"p1 dual-stack ready, p2 not ready on b", []discoveryv1.EndpointSlice{
			slice("a", v4, ep("p1", "10.0.0.1", true), ep("p2", "10.0.0.2", true)),
			slice("a", v6, ep("p1", "fd00::1", true)),
			slice("b", v4, ep("p1", "10.0.0.1", true), ep("p2", "10.0.0.2", false)),
		}, 2, 1, "1/2"},
		{"p1 not ready in one family of a: not ready on a", []discoveryv1.EndpointSlice{
			slice("a", v4, ep("p1", "10.0.0.1", true), ep("p2", "10.0.0.2", true)),
			slice("a", v6, ep("p1", "fd00::1", false)),
			slice("b", v4, ep("p1", "10.0.0.1", true), ep("p2", "10.0.0.2", false)),
		}, 1, 1, "0/2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := computeStatus(swh, nil, tt.slices, metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionTrue, Reason: swhv1alpha1.ReasonSynced})
			if st.Ports[0].TotalEndpoints != 2 || st.Ports[0].ReadyEndpoints != tt.readyA || st.Ports[1].ReadyEndpoints != tt.readyB {
				t.Errorf("ports %+v: want 2 pods on a (a dual-stack pod counts once), %d ready on a, %d on b", st.Ports, tt.readyA, tt.readyB)
			}
			if st.Ready != tt.ready || st.ObservedGeneration != 3 {
				t.Errorf("ready %q generation %d, want %s and 3", st.Ready, st.ObservedGeneration, tt.ready)
			}
		})
	}
}
