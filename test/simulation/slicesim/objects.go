package slicesim

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// podObject returns the Pod object of p as a layout reads it. Ready is what
// kubelet would set from one readiness probe over every port, with the node
// lifecycle controller's verdict on a node that is not Ready.
func (c *Cluster) podObject(r *Resource, p *Pod) *corev1.Pod {
	ready := corev1.ConditionTrue
	for i := range r.Ports {
		if !p.Passing(i) {
			ready = corev1.ConditionFalse
		}
	}
	if c.Down[p.Node] {
		ready = corev1.ConditionFalse
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: r.Namespace, UID: p.UID},
		Spec:       corev1.PodSpec{NodeName: c.Nodes[p.Node].Name},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      p.IP.String(),
			PodIPs:     []corev1.PodIP{{IP: p.IP.String()}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}},
		},
	}
	if p.Terminating {
		pod.DeletionTimestamp = &metav1.Time{Time: p.Since}
	}
	return pod
}

// serviceObject returns the Service of r: the child Service for ours, the
// selector Service for builtin (the reconciler does not read the selector).
func serviceObject(r *Resource) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace, UID: r.UID, Labels: r.Labels},
		Spec: corev1.ServiceSpec{
			Ports:      r.Ports,
			ClusterIP:  "10.96.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Selector:   map[string]string{"app.kubernetes.io/name": r.Name},
		},
	}
}

// nodeObject returns the Node object of node i.
func (c *Cluster) nodeObject(i int) *corev1.Node {
	n := c.Nodes[i]
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelTopologyZone: n.Zone}}}
}

// annotateReasons sets the agent's reasons annotation on the slices of r:
// one entry per endpoint that does not pass, as agent/publisher writes it
// (a pending probe for a new pod, a refused connection for a failing one,
// terminating), or node-not-ready as the controller writes it on a node that
// is not Ready. The messages are typical ones; the time is when the pod's
// verdicts last changed, so an unchanged pod yields an unchanged annotation.
func (c *Cluster) annotateReasons(r *Resource, byName map[string]*Pod, s *discoveryv1.EndpointSlice) error {
	port := 0
	if len(s.Ports) == 1 && s.Ports[0].Name != nil {
		for i := range r.Ports {
			if r.Ports[i].Name == *s.Ports[0].Name {
				port = i
			}
		}
	}
	probe := int32(port)
	reasons := swhv1alpha1.EndpointReasons{}
	for _, ep := range s.Endpoints {
		p := byName[ep.TargetRef.Name]
		since := metav1.NewTime(p.Since)
		target := fmt.Sprintf("%s:%d", p.IP, r.Ports[port].TargetPort.IntVal)
		switch {
		case c.Down[p.Node]:
			reasons[p.Name] = swhv1alpha1.EndpointReason{Reason: swhv1alpha1.ReasonNodeNotReady,
				Message: fmt.Sprintf("node %s is not Ready", c.Nodes[p.Node].Name), Since: since}
		case p.Starting:
			reasons[p.Name] = swhv1alpha1.EndpointReason{Reason: swhv1alpha1.ReasonPending, Probe: &probe,
				Message: fmt.Sprintf("tcp %s has no result yet", target), Since: since}
		case !p.Passing(port):
			reasons[p.Name] = swhv1alpha1.EndpointReason{Reason: "refused", Probe: &probe,
				Message: fmt.Sprintf("tcp %s: refused: dial tcp %s: connect: connection refused", target, target), Since: since}
		case p.Terminating:
			reasons[p.Name] = swhv1alpha1.EndpointReason{Reason: swhv1alpha1.ReasonTerminating,
				Message: "the pod is terminating; it serves while its probes pass", Since: since}
		}
	}
	value, err := reasons.EncodeBounded(swhv1alpha1.MaxEndpointReasonsBytes)
	if err != nil {
		return fmt.Errorf("slice %s: %w", s.Name, err)
	}
	if value != "" {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[swhv1alpha1.AnnotationEndpointReasons] = value
	}
	return nil
}
