package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationMaintenance, on a pod, takes the pod out of every
// ServiceWithHealthchecks that selects it on purpose: its agent publishes
// it not ready (reason maintenance) at once, with no Warning event, and
// stops the probes that check only the ports taken out, so no probe
// failure or alert follows. The disruption budget counts it unavailable.
//
// The value names the ports, by the resources' port names, separated by
// commas ("web,admin"); empty or "*" means every port. A name no resource
// has is ignored. When the annotation goes, or a port leaves the list, the
// port comes back only after its probes pass successThreshold times again.
const AnnotationMaintenance = "network.swh.dev/maintenance"

// Maintenance reports which ports of pod its maintenance annotation takes
// out: nil when the pod is not in maintenance; otherwise a function that
// says whether it takes out the port of that name.
func Maintenance(pod *corev1.Pod) func(port string) bool {
	value, ok := pod.Annotations[AnnotationMaintenance]
	if !ok {
		return nil
	}
	value = strings.TrimSpace(value)
	if value == "" || value == "*" {
		return func(string) bool { return true }
	}
	ports := map[string]bool{}
	for name := range strings.SplitSeq(value, ",") {
		if name = strings.TrimSpace(name); name == "*" {
			return func(string) bool { return true }
		} else if name != "" {
			ports[name] = true
		}
	}
	return func(port string) bool { return ports[port] }
}
