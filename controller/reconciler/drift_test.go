package reconciler

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

const testOwner = "swh-controller"

// driftResource is a resource with one port, as the API server stores it
// (the CRD defaults type and session affinity).
func driftResource() *swhv1alpha1.ServiceWithHealthchecks {
	return &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:    []swhv1alpha1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			Selector: map[string]string{"app": "web"},
		}}
}

// liveService is the child Service as the API server keeps it for the
// resource: the spec plus the server's defaults, the controller's apply as
// manager.
func liveService(swh *swhv1alpha1.ServiceWithHealthchecks) *corev1.Service {
	spec := swh.Spec.ServiceSpec()
	spec.Selector = nil
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if spec.Type == corev1.ServiceTypeNodePort && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if spec.InternalTrafficPolicy == nil {
		spec.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyCluster)
	}
	spec.ClusterIP, spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
	spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: swh.Name, ManagedFields: []metav1.ManagedFieldsEntry{
		managed(testOwner, metav1.ManagedFieldsOperationApply, `{"f:spec":{"f:type":{},"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:targetPort":{}}}}}`),
	}}, Spec: spec}
}

func managed(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}

// edited adds a manager entry for kubectl edit owning the given fields.
func edited(svc *corev1.Service, fields string) {
	svc.ManagedFields = append(svc.ManagedFields, managed("kubectl-edit", metav1.ManagedFieldsOperationUpdate, fields))
}

func TestForeignDrift(t *testing.T) {
	tests := []struct {
		name      string
		spec      func(*swhv1alpha1.ServiceWithHealthchecksSpec)
		edit      func(*corev1.Service)
		fields    []string
		patch     map[string]any // JSON of the wanted patch values
		noteParts []string
	}{
		{name: "in line with the spec: nothing", edit: func(*corev1.Service) {}},
		{name: "a selector", edit: func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "web"}
			edited(s, `{"f:spec":{"f:selector":{".":{},"f:app":{}}}}`)
		}, fields: []string{"selector"}, patch: map[string]any{"selector": nil}, noteParts: []string{"selector app=web (set by kubectl-edit)"}},
		{name: "a port the spec does not have", edit: func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "debug", Port: 9090, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9090)})
			edited(s, `{"f:spec":{"f:ports":{"k:{\"port\":9090,\"protocol\":\"TCP\"}":{".":{},"f:name":{}}}}}`)
		}, fields: []string{"ports"}, patch: map[string]any{"ports": []any{map[string]any{"name": "http", "port": float64(80), "protocol": "TCP", "targetPort": float64(8080)}}},
			noteParts: []string{"port 9090/TCP (set by kubectl-edit)"}},
		{name: "an app protocol the spec does not set", edit: func(s *corev1.Service) {
			s.Spec.Ports[0].AppProtocol = new("kubernetes.io/h2c")
		}, fields: []string{"ports"}, patch: map[string]any{"ports": []any{map[string]any{"name": "http", "port": float64(80), "protocol": "TCP", "targetPort": float64(8080)}}}},
		{name: "no port of the spec left: the apply adds them first", edit: func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "other", Port: 81, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(81)}}
		}, fields: []string{"ports"}},
		{name: "type NodePort on a resource without a type: node ports go too", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = ""
		}, edit: func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "debug", Port: 9090, Protocol: corev1.ProtocolTCP, NodePort: 30090})
			s.ManagedFields = []metav1.ManagedFieldsEntry{managed(testOwner, metav1.ManagedFieldsOperationApply,
				`{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:targetPort":{}}}}}`)}
			edited(s, `{"f:spec":{"f:type":{}}}`)
		}, fields: []string{"type", "ports"}, patch: map[string]any{"type": nil, "ports": []any{map[string]any{"name": "http", "port": float64(80), "protocol": "TCP", "targetPort": float64(8080)}}}},
		{name: "type the spec sets: the apply's", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = corev1.ServiceTypeClusterIP
		}, edit: func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }},
		{name: "traffic policies, affinity, addresses", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = corev1.ServiceTypeLoadBalancer
			s.SessionAffinity = "" // the CRD defaults it: an object stored before that default
		}, edit: func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyLocal)
			s.Spec.PublishNotReadyAddresses = true
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(int32(10800))}}
			s.Spec.ExternalIPs = []string{"192.0.2.1"}
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
			s.Spec.TrafficDistribution = new("PreferClose")
		}, fields: []string{"externalTrafficPolicy", "internalTrafficPolicy", "publishNotReadyAddresses", "sessionAffinity", "externalIPs", "loadBalancerSourceRanges", "trafficDistribution"},
			patch: map[string]any{"externalTrafficPolicy": nil, "internalTrafficPolicy": nil, "publishNotReadyAddresses": nil, "sessionAffinity": nil,
				"sessionAffinityConfig": nil, "externalIPs": nil, "loadBalancerSourceRanges": nil, "trafficDistribution": nil}},
		{name: "what the last applied spec set and the new one drops: the apply's to remove", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Ports = []swhv1alpha1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}
		}, edit: func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)},
				{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8443)},
			}
			s.Spec.PublishNotReadyAddresses = true
			s.Spec.ExternalIPs = []string{"192.0.2.1"}
			s.ManagedFields = []metav1.ManagedFieldsEntry{managed(testOwner, metav1.ManagedFieldsOperationApply,
				`{"f:spec":{"f:type":{},"f:publishNotReadyAddresses":{},"f:externalIPs":{},"f:ports":{`+
					`"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:targetPort":{}},`+
					`"k:{\"port\":443,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:targetPort":{}}}}}`)}
		}},
		{name: "a port someone added next to one the new spec drops: only the added one goes", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Ports = []swhv1alpha1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}
		}, edit: func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)},
				{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8443)},
				{Name: "debug", Port: 9090, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9090)},
			}
			s.ManagedFields = []metav1.ManagedFieldsEntry{managed(testOwner, metav1.ManagedFieldsOperationApply,
				`{"f:spec":{"f:type":{},"f:ports":{`+
					`"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:targetPort":{}},`+
					`"k:{\"port\":443,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:targetPort":{}}}}}`)}
			edited(s, `{"f:spec":{"f:ports":{"k:{\"port\":9090,\"protocol\":\"TCP\"}":{".":{},"f:name":{}}}}}`)
		}, fields: []string{"ports"}, patch: map[string]any{"ports": []any{
			map[string]any{"name": "http", "port": float64(80), "protocol": "TCP", "targetPort": float64(8080)},
			map[string]any{"name": "https", "port": float64(443), "protocol": "TCP", "targetPort": float64(8443)},
		}}, noteParts: []string{"port 9090/TCP (set by kubectl-edit)"}},
		{name: "values the spec sets are the apply's", spec: func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = corev1.ServiceTypeNodePort
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.PublishNotReadyAddresses = true
			s.ExternalIPs = []string{"192.0.2.1"}
		}, edit: func(s *corev1.Service) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			swh := driftResource()
			swh.Spec.Type, swh.Spec.SessionAffinity = corev1.ServiceTypeClusterIP, corev1.ServiceAffinityNone
			if tt.spec != nil {
				tt.spec(&swh.Spec)
			}
			svc := liveService(swh)
			tt.edit(svc)
			d := foreignDrift(swh, svc, testOwner, nil)
			if !slices.Equal(d.fields(), tt.fields) {
				t.Errorf("fields %v, want %v", d.fields(), tt.fields)
			}
			var got map[string]any
			if d.patch != nil {
				raw, err := json.Marshal(d.patch)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(raw, &got); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != len(tt.patch) || !equalJSON(got, tt.patch) {
				t.Errorf("patch %v, want %v", got, tt.patch)
			}
			for _, part := range tt.noteParts {
				if !strings.Contains(d.String(), part) {
					t.Errorf("note %q lacks %q", d.String(), part)
				}
			}
			if (d.selector != "") != slices.Contains(tt.fields, "selector") {
				t.Errorf("selector %q with fields %v", d.selector, tt.fields)
			}
		})
	}
}

func equalJSON(a, b map[string]any) bool {
	ra, _ := json.Marshal(a)
	rb, _ := json.Marshal(b)
	return string(ra) == string(rb)
}

func TestOwnedDrift(t *testing.T) {
	swh := driftResource()
	swh.Spec.Type = corev1.ServiceTypeNodePort
	tests := []struct {
		name   string
		edit   func(*corev1.Service)
		fields []string
	}{
		{"none", func(*corev1.Service) {}, nil},
		{"a value of the spec the controller still owns: a spec change not seen applied yet", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
		}, nil},
		{"type taken by kubectl edit", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			edited(s, `{"f:spec":{"f:type":{}}}`)
		}, []string{"type"}},
		{"target port taken by kubectl edit", func(s *corev1.Service) {
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(9999)
			edited(s, `{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{"f:targetPort":{}}}}}`)
		}, []string{"ports"}},
		{"port renumbered by kubectl edit", func(s *corev1.Service) {
			s.Spec.Ports[0].Port = 81
			edited(s, `{"f:spec":{"f:ports":{"k:{\"port\":81,\"protocol\":\"TCP\"}":{".":{},"f:port":{}}}}}`)
		}, []string{"ports"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := liveService(swh)
			tt.edit(svc)
			d := ownedDrift(swh, svc, testOwner)
			if !slices.Equal(d.fields(), tt.fields) {
				t.Errorf("fields %v (%s), want %v", d.fields(), d, tt.fields)
			}
			if d.patch != nil {
				t.Errorf("patch %v: the apply puts these back", d.patch)
			}
			if len(tt.fields) > 0 && !strings.Contains(d.String(), "kubectl-edit") {
				t.Errorf("note %q does not name kubectl-edit", d)
			}
		})
	}
}

func TestProxyLabelDrift(t *testing.T) {
	const key = "service.kubernetes.io/service-proxy-name"
	tests := []struct {
		name          string
		resource, svc map[string]string
		reported      bool
	}{
		{"no label", nil, nil, false},
		{"set by someone else", nil, map[string]string{key: "other"}, true},
		{"from the resource", map[string]string{key: "other"}, map[string]string{key: "other"}, false},
		{"another value than the resource's", map[string]string{key: "mine"}, map[string]string{key: "other"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			swh := driftResource()
			swh.Labels = tt.resource
			svc := liveService(swh)
			svc.Labels = maps.Clone(tt.svc)
			edited(svc, `{"f:metadata":{"f:labels":{"f:`+key+`":{}}}}`)
			note := proxyLabelDrift(swh, svc, testOwner)
			if (note != "") != tt.reported {
				t.Errorf("note %q, reported want %v", note, tt.reported)
			}
			if tt.reported && !strings.Contains(note, "kubectl-edit") {
				t.Errorf("note %q does not name who set it", note)
			}
		})
	}
}

func TestSetBy(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		managed(testOwner, metav1.ManagedFieldsOperationApply, `{"f:spec":{"f:selector":{}}}`),
		managed(testOwner, metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:selector":{}}}`),
		managed("b-tool", metav1.ManagedFieldsOperationApply, `{"f:spec":{"f:selector":{"f:app":{}}}}`),
		managed("a-tool", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:type":{}}}`),
		managed("broken", metav1.ManagedFieldsOperationUpdate, `not json`),
	}}}
	got := setBy(svc, testOwner, "f:spec", "f:selector")
	// Only the controller's apply is the controller's: what its merge
	// patches set is not.
	if want := " (set by b-tool, swh-controller)"; got != want {
		t.Errorf("setBy = %q, want %q", got, want)
	}
	if got := setBy(svc, testOwner, "f:spec", "f:ports"); got != "" {
		t.Errorf("setBy of an unowned field = %q", got)
	}
}
