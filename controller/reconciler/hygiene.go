package reconciler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// staleSlices returns the agents' slices of a resource that no agent will
// update any more, each with the reason: its node no longer exists, or its
// port or address family is no longer part of the resource. Only slices
// whose labels say an swh agent manages them for this resource are
// considered; the caller lists nothing else.
//
// nodeLabels holds endpoints.NodeLabelValue of every existing node;
// families are the child Service's IP families (empty: any family).
func staleSlices(swh *swhv1alpha1.ServiceWithHealthchecks, slices []discoveryv1.EndpointSlice, nodeLabels map[string]bool, families []corev1.IPFamily) map[*discoveryv1.EndpointSlice]string {
	ports := map[string]bool{}
	for _, p := range swh.Spec.Ports {
		ports[p.Name] = true
	}
	fams := map[discoveryv1.AddressType]bool{}
	for _, f := range families {
		fams[discoveryv1.AddressType(f)] = true
	}
	out := map[*discoveryv1.EndpointSlice]string{}
	for i := range slices {
		s := &slices[i]
		if !managedByAgent(s, swh.Name) {
			continue
		}
		node, hasNode := s.Labels[endpoints.DefaultNodeLabel]
		port := ""
		if len(s.Ports) > 0 && s.Ports[0].Name != nil {
			port = *s.Ports[0].Name
		}
		switch {
		case hasNode && !nodeLabels[node]:
			out[s] = fmt.Sprintf("node %s no longer exists", node)
		case len(s.Ports) > 0 && !ports[port]:
			out[s] = fmt.Sprintf("port %q is no longer in spec.ports", port)
		case len(fams) > 0 && !fams[s.AddressType]:
			out[s] = fmt.Sprintf("address family %s is no longer served", s.AddressType)
		}
	}
	return out
}

// managedByAgent reports whether the slice is an swh agent's slice of the
// named resource: labels decide, never the name.
func managedByAgent(s *discoveryv1.EndpointSlice, service string) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == endpoints.DefaultManagedBy &&
		s.Labels[discoveryv1.LabelServiceName] == service
}
