package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ServiceSpec returns the Service spec the resource describes, with its
// selector: the controller drops the selector before it writes the child
// Service, the agent uses it to pick the pods to probe.
func (s *ServiceWithHealthchecksSpec) ServiceSpec() corev1.ServiceSpec {
	out := corev1.ServiceSpec{
		Ports:                         make([]corev1.ServicePort, 0, len(s.Ports)),
		Selector:                      copyStringMap(s.Selector),
		ClusterIP:                     s.ClusterIP,
		ClusterIPs:                    append([]string(nil), s.ClusterIPs...),
		Type:                          s.Type,
		ExternalIPs:                   append([]string(nil), s.ExternalIPs...),
		SessionAffinity:               s.SessionAffinity,
		LoadBalancerIP:                s.LoadBalancerIP,
		LoadBalancerSourceRanges:      append([]string(nil), s.LoadBalancerSourceRanges...),
		ExternalName:                  s.ExternalName,
		ExternalTrafficPolicy:         s.ExternalTrafficPolicy,
		HealthCheckNodePort:           s.HealthCheckNodePort,
		PublishNotReadyAddresses:      s.PublishNotReadyAddresses,
		SessionAffinityConfig:         s.SessionAffinityConfig.DeepCopy(),
		IPFamilies:                    append([]corev1.IPFamily(nil), s.IPFamilies...),
		IPFamilyPolicy:                copyPtr(s.IPFamilyPolicy),
		AllocateLoadBalancerNodePorts: copyPtr(s.AllocateLoadBalancerNodePorts),
		LoadBalancerClass:             copyPtr(s.LoadBalancerClass),
		InternalTrafficPolicy:         copyPtr(s.InternalTrafficPolicy),
		TrafficDistribution:           copyPtr(s.TrafficDistribution),
	}
	for _, p := range s.Ports {
		out.Ports = append(out.Ports, p.ServicePort())
	}
	return out
}

// ServicePort returns the port as a corev1.ServicePort. An unset target port
// becomes the port number, as the API server defaults it for a Service.
func (p *ServicePort) ServicePort() corev1.ServicePort {
	out := corev1.ServicePort{
		Name:        p.Name,
		Protocol:    p.Protocol,
		AppProtocol: copyPtr(p.AppProtocol),
		Port:        p.Port,
		TargetPort:  p.TargetPort,
		NodePort:    p.NodePort,
	}
	if out.Protocol == "" {
		out.Protocol = corev1.ProtocolTCP
	}
	if isUnset(out.TargetPort) {
		out.TargetPort = intstr.FromInt32(p.Port)
	}
	return out
}

func copyStringMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// isUnset reports whether an int-or-string holds neither a number nor a name.
func isUnset(v intstr.IntOrString) bool {
	if v.Type == intstr.String {
		return v.StrVal == ""
	}
	return v.IntVal == 0
}
