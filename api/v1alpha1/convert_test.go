package v1alpha1

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// jsonFields maps the JSON names of a struct's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// TestSpecCoversServiceSpec fails when Kubernetes adds a Service field that
// the resource does not repeat, or when a repeated field's type drifts.
func TestSpecCoversServiceSpec(t *testing.T) {
	tests := []struct {
		name     string
		ours     reflect.Type
		upstream reflect.Type
	}{
		{"ServiceSpec", reflect.TypeFor[ServiceWithHealthchecksSpec](), reflect.TypeFor[corev1.ServiceSpec]()},
		{"ServicePort", reflect.TypeFor[ServicePort](), reflect.TypeFor[corev1.ServicePort]()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ours := jsonFields(tt.ours)
			for name, typ := range jsonFields(tt.upstream) {
				got, ok := ours[name]
				if !ok {
					t.Errorf("corev1.%s.%s is missing", tt.name, name)
					continue
				}
				if name == "ports" {
					continue // our own ServicePort, checked by the second case
				}
				if got != typ {
					t.Errorf("field %s has type %v, corev1 has %v", name, got, typ)
				}
			}
		})
	}
}

func TestServiceSpecCarriesEveryField(t *testing.T) {
	local := corev1.ServiceInternalTrafficPolicyLocal
	policy := corev1.IPFamilyPolicyPreferDualStack
	class, dist, proto := "example.com/lb", "PreferClose", "http"
	spec := ServiceWithHealthchecksSpec{
		Ports: []ServicePort{
			{Name: "web", Protocol: corev1.ProtocolTCP, AppProtocol: &proto, Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080},
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		},
		Selector:                      map[string]string{"app": "x"},
		ClusterIP:                     "10.0.0.10",
		ClusterIPs:                    []string{"10.0.0.10", "fd00::10"},
		Type:                          corev1.ServiceTypeLoadBalancer,
		ExternalIPs:                   []string{"192.0.2.10"},
		SessionAffinity:               corev1.ServiceAffinityClientIP,
		LoadBalancerIP:                "192.0.2.11",
		LoadBalancerSourceRanges:      []string{"192.0.2.0/24"},
		ExternalTrafficPolicy:         corev1.ServiceExternalTrafficPolicyLocal,
		HealthCheckNodePort:           31000,
		PublishNotReadyAddresses:      true,
		SessionAffinityConfig:         &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(int32(60))}},
		IPFamilies:                    []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		IPFamilyPolicy:                &policy,
		AllocateLoadBalancerNodePorts: new(false),
		LoadBalancerClass:             &class,
		InternalTrafficPolicy:         &local,
		TrafficDistribution:           &dist,
	}
	got := spec.ServiceSpec()
	// Every field set above must arrive; compare field by field through JSON names.
	want := reflect.ValueOf(got)
	for i := 0; i < want.NumField(); i++ {
		f := want.Type().Field(i)
		if f.Name == "ExternalName" {
			continue // always empty in a valid resource
		}
		if want.Field(i).IsZero() {
			t.Errorf("ServiceSpec().%s is empty: the conversion drops it", f.Name)
		}
	}
	if got.Ports[1].TargetPort != intstr.FromInt32(53) {
		t.Errorf("unset targetPort = %v, want the port number 53", got.Ports[1].TargetPort)
	}
	if got.Ports[0].TargetPort != intstr.FromString("http") || got.Ports[0].NodePort != 30080 || *got.Ports[0].AppProtocol != "http" {
		t.Errorf("port 0 = %+v, fields lost", got.Ports[0])
	}
	// The result must not alias the resource.
	got.Selector["app"] = "changed"
	got.ClusterIPs[0] = "changed"
	*got.IPFamilyPolicy = corev1.IPFamilyPolicySingleStack
	if spec.Selector["app"] != "x" || spec.ClusterIPs[0] != "10.0.0.10" || *spec.IPFamilyPolicy != policy {
		t.Error("ServiceSpec() shares memory with the resource")
	}
}

func TestServicePortDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   ServicePort
		want corev1.ServicePort
	}{
		{"empty protocol is TCP", ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080)},
			corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		{"unset target port is the port", ServicePort{Port: 80, Protocol: corev1.ProtocolUDP},
			corev1.ServicePort{Protocol: corev1.ProtocolUDP, Port: 80, TargetPort: intstr.FromInt32(80)}},
		{"empty name is unset", ServicePort{Port: 80, TargetPort: intstr.FromString("")},
			corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.ServicePort(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ServicePort() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
