package endpoints

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ResolvePort returns the port number target designates on pod: the number
// itself, or the containerPort of the container port named target. Named
// ports are looked up in the pod's containers, then in its sidecars (init
// containers with restartPolicy Always), as the built-in EndpointSlice
// controller does.
//
// A non-empty protocol must also match the container port's protocol (unset
// means TCP); Service ports resolve that way. Probes pass "" since container
// port names are unique within a pod.
//
// ok is false when target is unset, out of range, or names no port of pod.
func ResolvePort(pod *corev1.Pod, target intstr.IntOrString, protocol corev1.Protocol) (port int32, ok bool) {
	if target.Type == intstr.Int {
		if validPortNumber(target.IntVal) {
			return target.IntVal, true
		}
		return 0, false
	}
	if target.StrVal == "" || pod == nil {
		return 0, false
	}
	if p, ok := findNamedPort(pod.Spec.Containers, target.StrVal, protocol, false); ok {
		return p, true
	}
	return findNamedPort(pod.Spec.InitContainers, target.StrVal, protocol, true)
}

func findNamedPort(containers []corev1.Container, name string, protocol corev1.Protocol, sidecarsOnly bool) (int32, bool) {
	for i := range containers {
		c := &containers[i]
		if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			continue
		}
		for _, p := range c.Ports {
			if p.Name != name {
				continue
			}
			if protocol != "" && orTCP(p.Protocol) != orTCP(protocol) {
				continue
			}
			if validPortNumber(p.ContainerPort) {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// orTCP applies the API server's default protocol.
func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func validPortNumber(p int32) bool { return p >= 1 && p <= 65535 }

// serviceTarget returns the targetPort of a Service port with the API
// server's default applied: unset means the port number.
func serviceTarget(p *corev1.ServicePort) intstr.IntOrString {
	if (p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal == 0) ||
		(p.TargetPort.Type == intstr.String && p.TargetPort.StrVal == "") {
		return intstr.FromInt32(p.Port)
	}
	return p.TargetPort
}

// PortLabel names a Service port in messages and metric labels: its name,
// or its number when it has none (a Service's only port may be unnamed; a
// port name always has a letter, so the two never collide).
func PortLabel(name string, number int32) string {
	if name != "" {
		return name
	}
	return strconv.Itoa(int(number))
}

// PodReady reports whether the pod's Ready condition is True: the verdict of
// a port no probe gates, as for a plain Service.
func PodReady(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return pod.Status.Conditions[i].Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFinished reports whether the pod reached a terminal phase: its
// containers are gone for good and it must not be published.
func podFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
