package handback

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// withSelector returns the Service selecting the resource's pods, still
// the resource's; nil with ok when it selects them already. ok is false
// when svc is not the resource's, or the resource selects nothing (the
// built-in controller would publish nothing: its Service is left as it
// is).
func withSelector(svc *corev1.Service, swh *swhv1alpha1.ServiceWithHealthchecks) (out *corev1.Service, ok bool) {
	if !metav1.IsControlledBy(svc, swh) || len(swh.Spec.Selector) == 0 {
		return nil, false
	}
	if maps.Equal(svc.Spec.Selector, swh.Spec.Selector) {
		return nil, true
	}
	out = svc.DeepCopy()
	out.Spec.Selector = maps.Clone(swh.Spec.Selector)
	return out, true
}

// handedBack returns the Service as a plain Service: without the
// resource's owner reference and swh's label, selecting the resource's
// pods. ok is false when svc is not the resource's (nothing to give back)
// or the resource selects nothing (the built-in controller would publish
// nothing: its Service is left as it is).
func handedBack(svc *corev1.Service, swh *swhv1alpha1.ServiceWithHealthchecks) (out *corev1.Service, ok bool) {
	owned := false
	var refs []metav1.OwnerReference
	for _, ref := range svc.OwnerReferences {
		if ref.UID == swh.UID {
			owned = true
			continue
		}
		refs = append(refs, ref)
	}
	if !owned || len(swh.Spec.Selector) == 0 {
		return nil, false
	}
	out = svc.DeepCopy()
	out.OwnerReferences = refs
	delete(out.Labels, swhv1alpha1.LabelService)
	out.Spec.Selector = maps.Clone(swh.Spec.Selector)
	return out, true
}

// uncovered returns, per port, the pods of live (those that will receive
// traffic once the Service is plain: not terminating, Ready) that the
// agents' slices publish ready and the built-in slices do not publish
// ready yet: while any is left, deleting the agents' slices would take
// endpoints away.
func uncovered(agents, builtin []discoveryv1.EndpointSlice, live map[string]bool) (map[string][]string, error) {
	ready := map[string]map[string]bool{} // port -> pod -> ready in a built-in slice
	for _, s := range builtin {
		for _, p := range s.Ports {
			port := ""
			if p.Name != nil {
				port = *p.Name
			}
			if ready[port] == nil {
				ready[port] = map[string]bool{}
			}
			for _, ep := range s.Endpoints {
				if ep.TargetRef != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					ready[port][ep.TargetRef.Name] = true
				}
			}
		}
	}
	published, err := endpoints.Read(agents, endpoints.Options{})
	if err != nil {
		return nil, err
	}
	missing := map[string][]string{}
	for _, p := range published {
		if !p.Ready || p.Pod == nil || !live[p.Pod.Name] || ready[p.Port][p.Pod.Name] {
			continue
		}
		if !slices.Contains(missing[p.Port], p.Pod.Name) {
			missing[p.Port] = append(missing[p.Port], p.Pod.Name)
		}
	}
	return missing, nil
}
