package reconciler

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// portCounts aggregates the agents' slices of one resource: per port name,
// the pods published and whether each is ready there, as endpoints.Read
// combines their entries (a dual-stack pod is ready when both families
// are).
type portCounts struct {
	total map[string]map[string]bool // port name -> pod -> ready on that port
}

func countSlices(slices []discoveryv1.EndpointSlice) portCounts {
	pc := portCounts{total: map[string]map[string]bool{}}
	// The default options are valid: no error.
	published, _ := endpoints.Read(slices, endpoints.Options{})
	for _, p := range published {
		pods := pc.total[p.Port]
		if pods == nil {
			pods = map[string]bool{}
			pc.total[p.Port] = pods
		}
		// Two nodes' slices hold the pod only when an agent names another
		// node's pod under its own nodeName (the admission policy cannot
		// check a pod's node): ready only when both say so. The eviction
		// guard, stricter, reads only the pod's own node.
		ready, seen := pods[p.Key]
		pods[p.Key] = p.Ready && (ready || !seen)
	}
	return pc
}

// computeStatus builds the status from the child Service and the slices.
// Conditions already set on the resource keep their transition times.
func computeStatus(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, slices []discoveryv1.EndpointSlice, serviceCond metav1.Condition) swhv1alpha1.ServiceWithHealthchecksStatus {
	st := swhv1alpha1.ServiceWithHealthchecksStatus{
		ObservedGeneration: swh.Generation,
		Conditions:         append([]metav1.Condition(nil), swh.Status.Conditions...),
	}
	st.ServicePorts = specPortsColumn(swh.Spec.Ports)
	if svc != nil && ownedBy(svc, swh) {
		st.ServicePorts = servicePortsColumn(svc.Spec.Ports)
		st.ClusterIP = svc.Spec.ClusterIP
		st.ClusterIPs = append([]string(nil), svc.Spec.ClusterIPs...)
		st.LoadBalancer = *svc.Status.LoadBalancer.DeepCopy()
	}
	counts := countSlices(slices)
	all := map[string]bool{}     // every pod published on any port
	readyAll := map[string]int{} // pod -> number of ports it is ready on
	for _, p := range swh.Spec.Ports {
		pods := counts.total[p.Name]
		ps := swhv1alpha1.PortStatus{Name: p.Name, Port: p.Port, Protocol: p.Protocol}
		if ps.Protocol == "" {
			ps.Protocol = corev1.ProtocolTCP
		}
		for pod, ready := range pods {
			all[pod] = true
			ps.TotalEndpoints++
			if ready {
				ps.ReadyEndpoints++
				readyAll[pod]++
			}
		}
		st.Ports = append(st.Ports, ps)
	}
	st.TotalEndpoints = int32(len(all))
	for _, n := range readyAll {
		if n == len(swh.Spec.Ports) {
			st.ReadyEndpoints++
		}
	}
	st.Ready = fmt.Sprintf("%d/%d", st.ReadyEndpoints, st.TotalEndpoints)

	serviceCond.ObservedGeneration = swh.Generation
	meta.SetStatusCondition(&st.Conditions, serviceCond)
	meta.SetStatusCondition(&st.Conditions, endpointsCondition(swh, st))
	sort.Slice(st.Conditions, func(i, j int) bool { return st.Conditions[i].Type < st.Conditions[j].Type })
	return st
}

// servicePortsColumn prints ports as kubectl get service does (its
// makePortString): port[:nodePort]/protocol, comma-separated.
func servicePortsColumn(ports []corev1.ServicePort) string {
	pieces := make([]string, len(ports))
	for i, p := range ports {
		protocol := p.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		if p.NodePort > 0 {
			pieces[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, protocol)
		} else {
			pieces[i] = fmt.Sprintf("%d/%s", p.Port, protocol)
		}
	}
	return strings.Join(pieces, ",")
}

// specPortsColumn is servicePortsColumn of the spec's ports, shown until the
// resource has a Service of its own.
func specPortsColumn(ports []swhv1alpha1.ServicePort) string {
	svcPorts := make([]corev1.ServicePort, len(ports))
	for i, p := range ports {
		svcPorts[i] = corev1.ServicePort{Port: p.Port, NodePort: p.NodePort, Protocol: p.Protocol}
	}
	return servicePortsColumn(svcPorts)
}

func endpointsCondition(swh *swhv1alpha1.ServiceWithHealthchecks, st swhv1alpha1.ServiceWithHealthchecksStatus) metav1.Condition {
	c := metav1.Condition{Type: swhv1alpha1.ConditionEndpointsAvailable, ObservedGeneration: swh.Generation}
	anyReady := false
	for _, p := range st.Ports {
		anyReady = anyReady || p.ReadyEndpoints > 0
	}
	switch {
	case st.TotalEndpoints == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, swhv1alpha1.ReasonNoEndpoints, "no pod is published yet"
	case !anyReady:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, swhv1alpha1.ReasonNoReadyEndpoints, fmt.Sprintf("none of %d pods passes its probes", st.TotalEndpoints)
	case st.ReadyEndpoints < st.TotalEndpoints:
		c.Status, c.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonSomeEndpointsNotReady
		c.Message = fmt.Sprintf("%d of %d pods ready on every port", st.ReadyEndpoints, st.TotalEndpoints)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonEndpointsReady
		c.Message = fmt.Sprintf("all %d pods ready", st.TotalEndpoints)
	}
	return c
}

// statusEqual compares two statuses, ignoring condition timestamps that
// SetStatusCondition keeps stable anyway.
func statusEqual(a, b swhv1alpha1.ServiceWithHealthchecksStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}
