package endpoints

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// podOpt shapes a test pod.
type podOpt func(*corev1.Pod)

// testPod returns a running, ready pod of namespace ns on node1 with the
// given IPs.
func testPod(name string, ips []string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: "node1"},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
}

func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}

func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

// namedPorts adds a container exposing name=number pairs over TCP.
func namedPorts(kv ...any) podOpt {
	return func(p *corev1.Pod) {
		c := corev1.Container{Name: fmt.Sprintf("c%d", len(p.Spec.Containers))}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Ports = append(c.Ports, corev1.ContainerPort{Name: kv[i].(string), ContainerPort: int32(kv[i+1].(int)), Protocol: corev1.ProtocolTCP})
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
}

func svcPort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

func num(n int) intstr.IntOrString                         { return intstr.FromInt32(int32(n)) }
func name(s string) intstr.IntOrString                     { return intstr.FromString(s) }
func targets(t ...intstr.IntOrString) []intstr.IntOrString { return t }

// testService returns a Service "web" of namespace ns.
func testService(ports ...corev1.ServicePort) Service {
	return Service{Name: "web", Namespace: "ns", UID: "svc-uid", Ports: ports}
}

// checkSlice fails t when s would not pass the API server's validation of
// an EndpointSlice (the parts a client can get wrong).
func checkSlice(t testing.TB, s *discoveryv1.EndpointSlice) {
	t.Helper()
	var errs []string
	errs = append(errs, validation.IsDNS1123Subdomain(s.Name)...)
	for _, e := range metav1validation.ValidateLabels(s.Labels, field.NewPath("labels")) {
		errs = append(errs, e.Error())
	}
	if s.Labels[discoveryv1.LabelServiceName] == "" || s.Labels[discoveryv1.LabelManagedBy] == "" {
		errs = append(errs, "missing service-name or managed-by label")
	}
	if strings.Contains(s.Labels[discoveryv1.LabelManagedBy], "/") {
		errs = append(errs, "managed-by has a /")
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		errs = append(errs, "address type "+string(s.AddressType))
	}
	if len(s.Endpoints) > MaxEndpointsPerSlice {
		errs = append(errs, fmt.Sprintf("%d endpoints", len(s.Endpoints)))
	}
	for _, p := range s.Ports {
		if p.Name == nil || p.Protocol == nil || p.Port == nil {
			errs = append(errs, "port with nil field")
			continue
		}
		if *p.Name != "" {
			errs = append(errs, validation.IsDNS1123Label(*p.Name)...)
		}
		errs = append(errs, validation.IsValidPortNum(int(*p.Port))...)
	}
	for _, ep := range s.Endpoints {
		if len(ep.Addresses) != 1 {
			errs = append(errs, fmt.Sprintf("%d addresses", len(ep.Addresses)))
		}
		for _, a := range ep.Addresses {
			for _, e := range validation.IsValidIP(field.NewPath("address"), a) {
				errs = append(errs, e.Error())
			}
			if a, _ := endpointAddr(a); familyOf(a) != s.AddressType {
				errs = append(errs, "address of the wrong family")
			}
		}
		if ep.NodeName != nil {
			errs = append(errs, validation.IsDNS1123Subdomain(*ep.NodeName)...)
		}
		if ep.Hostname != nil {
			errs = append(errs, validation.IsDNS1123Label(*ep.Hostname)...)
		}
	}
	for _, o := range s.OwnerReferences {
		if o.UID == "" || o.Name == "" || o.Kind == "" || o.APIVersion == "" {
			errs = append(errs, "incomplete owner reference")
		}
	}
	if len(errs) > 0 {
		t.Errorf("slice %q is invalid: %s", s.Name, strings.Join(errs, "; "))
	}
}

// brief renders a slice on one line for comparisons and examples:
// "name family portname/protocol:number pod@address(flags)...", flags being
// R (ready), S (serving), T (terminating) or "-".
func brief(s discoveryv1.EndpointSlice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", s.Name, s.AddressType)
	for _, p := range s.Ports {
		fmt.Fprintf(&b, " %s/%s:%d", *p.Name, *p.Protocol, *p.Port)
	}
	for _, ep := range s.Endpoints {
		fmt.Fprintf(&b, " %s@%s(%s%s%s)", ep.TargetRef.Name, ep.Addresses[0],
			flag(ep.Conditions.Ready, "R"), flag(ep.Conditions.Serving, "S"), flag(ep.Conditions.Terminating, "T"))
	}
	return b.String()
}

func flag(p *bool, s string) string {
	if p != nil && *p {
		return s
	}
	return "-"
}
