package endpoints

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fullSlice builds a slice with every field Build sets and a passing, a
// failing and a terminating endpoint, for a single unnamed port.
func fullSlice(t *testing.T) discoveryv1.EndpointSlice {
	t.Helper()
	svc := testService(svcPort("", 80, name("web")))
	svc.Headless = true
	svc.ProxyName = "proxy"
	svc.Ports[0].AppProtocol = new("http")
	pods := []PodVerdicts{
		{testPod("a", []string{"10.0.0.1"}, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "a", "web" }), verdicts(pass(8080))},
		{testPod("b", []string{"10.0.0.2"}), verdicts(fail(8080))},
		{testPod("c", []string{"10.0.0.3"}, terminating), verdicts(pass(8080))},
	}
	got, err := Build(svc, node1, pods, Options{})
	if err != nil || len(got) != 1 {
		t.Fatalf("%d slices, %v", len(got), err)
	}
	return got[0]
}

// serverRoundTrip imitates what a create and a read back through the API
// server do to a slice: JSON both ways, the discovery/v1 defaults, and the
// metadata the server sets.
func serverRoundTrip(t *testing.T, s discoveryv1.EndpointSlice) discoveryv1.EndpointSlice {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out discoveryv1.EndpointSlice
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	for i := range out.Ports { // SetDefaults_EndpointPort
		if out.Ports[i].Name == nil {
			out.Ports[i].Name = new("")
		}
		if out.Ports[i].Protocol == nil {
			out.Ports[i].Protocol = new(corev1.ProtocolTCP)
		}
	}
	out.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
	out.ResourceVersion = "12345"
	out.UID = "slice-uid"
	out.Generation = 1
	out.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	out.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "agent", Operation: metav1.ManagedFieldsOperationUpdate}}
	return out
}

func TestUpToDateAfterServerRoundTrip(t *testing.T) {
	desired := fullSlice(t)
	existing := serverRoundTrip(t, desired)
	if !UpToDate(&existing, &desired) {
		t.Fatalf("a slice read back differs from the one that created it:\n%+v\n%+v", desired, existing)
	}
	// And when the desired slice leaves the defaulted fields unset.
	sparse := desired.DeepCopy()
	sparse.Ports[0].Name, sparse.Ports[0].Protocol = nil, nil
	existing = serverRoundTrip(t, *sparse)
	if !UpToDate(&existing, sparse) || !UpToDate(&existing, &desired) {
		t.Error("port name nil vs \"\", protocol nil vs TCP")
	}
}

// TestUpToDate lists what is and is not a difference.
func TestUpToDate(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*discoveryv1.EndpointSlice)
		equal bool
	}{
		{"server metadata", func(s *discoveryv1.EndpointSlice) {
			s.ResourceVersion, s.UID, s.Generation = "9", "x", 7
			s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
			s.CreationTimestamp = metav1.Now()
		}, true},
		{"annotations", func(s *discoveryv1.EndpointSlice) {
			s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z"}
		}, true},
		{"someone else's label", func(s *discoveryv1.EndpointSlice) { s.Labels["team"] = "a" }, true},
		{"finalizers", func(s *discoveryv1.EndpointSlice) { s.Finalizers = []string{"x/y"} }, true},
		{"nil conditions mean ready and serving, not terminating", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Conditions = discoveryv1.EndpointConditions{}
		}, true},
		{"nil ready on a failing endpoint means ready", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[1].Conditions.Ready = nil
		}, false},
		{"nil terminating on a terminating endpoint", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[2].Conditions.Terminating = nil
		}, false},
		{"targetRef resourceVersion", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].TargetRef.ResourceVersion = "5" }, true},
		{"empty hints", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Hints = &discoveryv1.EndpointHints{} }, true},
		{"deprecated topology", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].DeprecatedTopology = map[string]string{"kubernetes.io/hostname": "node1"}
		}, true},
		{"controller false vs nil", func(s *discoveryv1.EndpointSlice) {
			s.OwnerReferences[0].BlockOwnerDeletion = new(false)
		}, true},

		{"name", func(s *discoveryv1.EndpointSlice) { s.Name += "x" }, false},
		{"namespace", func(s *discoveryv1.EndpointSlice) { s.Namespace = "other" }, false},
		{"service-name label", func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "other" }, false},
		{"managed-by label missing", func(s *discoveryv1.EndpointSlice) { delete(s.Labels, discoveryv1.LabelManagedBy) }, false},
		{"headless label missing", func(s *discoveryv1.EndpointSlice) { delete(s.Labels, corev1.IsHeadlessService) }, false},
		{"owner UID", func(s *discoveryv1.EndpointSlice) { s.OwnerReferences[0].UID = "old" }, false},
		{"owner not controller", func(s *discoveryv1.EndpointSlice) { s.OwnerReferences[0].Controller = nil }, false},
		{"extra owner", func(s *discoveryv1.EndpointSlice) {
			s.OwnerReferences = append(s.OwnerReferences, metav1.OwnerReference{Kind: "X", Name: "x", UID: "x", APIVersion: "v1"})
		}, false},
		{"address type", func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 }, false},
		{"port number", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = new(int32(81)) }, false},
		{"port number nil", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = nil }, false},
		{"port name", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Name = new("other") }, false},
		{"protocol", func(s *discoveryv1.EndpointSlice) { s.Ports[0].Protocol = new(corev1.ProtocolUDP) }, false},
		{"app protocol", func(s *discoveryv1.EndpointSlice) { s.Ports[0].AppProtocol = nil }, false},
		{"no ports", func(s *discoveryv1.EndpointSlice) { s.Ports = nil }, false},
		{"address", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.0.0.9"} }, false},
		{"endpoint order", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0], s.Endpoints[1] = s.Endpoints[1], s.Endpoints[0]
		}, false},
		{"endpoint removed", func(s *discoveryv1.EndpointSlice) { s.Endpoints = s.Endpoints[1:] }, false},
		{"ready", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = new(false) }, false},
		{"serving", func(s *discoveryv1.EndpointSlice) { s.Endpoints[2].Conditions.Serving = new(false) }, false},
		{"hostname", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Hostname = nil }, false},
		{"nodeName", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].NodeName = new("node2") }, false},
		{"zone", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Zone = nil }, false},
		{"targetRef", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].TargetRef.UID = "other" }, false},
		{"targetRef nil", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].TargetRef = nil }, false},
		{"hints", func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desired := fullSlice(t)
			existing := serverRoundTrip(t, desired)
			tt.edit(&existing)
			if got := UpToDate(&existing, &desired); got != tt.equal {
				t.Errorf("UpToDate = %v, want %v", got, tt.equal)
			}
		})
	}
}

func TestUpToDateOptionalLabelsOneWay(t *testing.T) {
	desired := fullSlice(t)
	delete(desired.Labels, corev1.IsHeadlessService)
	existing := serverRoundTrip(t, fullSlice(t))
	if UpToDate(&existing, &desired) {
		t.Error("a headless label the Service lost must be removed")
	}
	if !UpToDate(nil, nil) || UpToDate(nil, &desired) || UpToDate(&existing, nil) {
		t.Error("nil handling")
	}
	// Another writer's label on existing is left alone: existing is up to
	// date. The other way round, desired lacks it: the order matters.
	desired = fullSlice(t)
	existing = serverRoundTrip(t, desired)
	existing.Labels["team"] = "payments"
	if !UpToDate(&existing, &desired) {
		t.Error("a label desired does not set made existing stale")
	}
	if UpToDate(&desired, &existing) {
		t.Error("the arguments compare symmetrically")
	}
}
