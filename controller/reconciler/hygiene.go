package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/endpoints"
)

// staleSlices returns the agents' slices of a resource that no agent will
// update any more, each with the reason: its node no longer exists, or its
// port or address family is no longer one of the child Service's. The agents
// publish what the live Service says, not what the spec says: judging by the
// spec while the Service lags it (an apply the API server refused) would
// delete slices the agents recreate at once. judgePorts false (the Service
// and the spec disagree) keeps every slice of an existing node. Only slices
// whose labels say an swh agent manages them for this Service are
// considered; the caller lists nothing else.
//
// nodeLabels holds endpoints.NodeLabelValue of every existing node.
func staleSlices(svc *corev1.Service, slices []discoveryv1.EndpointSlice, nodeLabels map[string]bool, judgePorts bool) map[*discoveryv1.EndpointSlice]string {
	ports := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = true
	}
	fams := map[discoveryv1.AddressType]bool{}
	for _, f := range svc.Spec.IPFamilies {
		fams[discoveryv1.AddressType(f)] = true
	}
	out := map[*discoveryv1.EndpointSlice]string{}
	for i := range slices {
		s := &slices[i]
		if !managedByAgent(s, svc.Name) {
			continue
		}
		node, hasNode := s.Labels[endpoints.DefaultNodeLabel]
		port, _ := endpoints.SlicePort(s)
		switch {
		case hasNode && !nodeLabels[node]:
			out[s] = fmt.Sprintf("node %s no longer exists", node)
		case !judgePorts:
		case len(s.Ports) > 0 && !ports[port]:
			out[s] = fmt.Sprintf("port %q is no longer a port of the Service", port)
		case len(fams) > 0 && !fams[s.AddressType]:
			out[s] = fmt.Sprintf("address family %s is no longer served", s.AddressType)
		}
	}
	return out
}

// findStale returns the agents' slices of svc's resource that no agent will
// update, with the reason (see staleSlices). What the cache says is checked
// with the API server before a slice is called stale: a node the cache
// lacks (its watch was down), and a port or address family the cached
// Service lacks (an agent may already publish what a newer Service says).
func findStale(ctx context.Context, cache, api client.Reader, svc *corev1.Service, slices []discoveryv1.EndpointSlice, judgePorts bool) (map[*discoveryv1.EndpointSlice]string, error) {
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := cache.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodeLabels := make(map[string]bool, len(nodes.Items))
	for i := range nodes.Items {
		nodeLabels[endpoints.NodeLabelValue(nodes.Items[i].Name)] = true
	}
	if missingNode(svc, slices, nodeLabels) {
		if err := api.List(ctx, nodes); err != nil {
			return nil, fmt.Errorf("listing nodes from the API server: %w", err)
		}
		for i := range nodes.Items {
			nodeLabels[endpoints.NodeLabelValue(nodes.Items[i].Name)] = true
		}
	}
	stale := staleSlices(svc, slices, nodeLabels, judgePorts)
	if !judgePorts || len(stale) == len(staleSlices(svc, slices, nodeLabels, false)) {
		return stale, nil
	}
	fresh := &corev1.Service{}
	err := api.Get(ctx, client.ObjectKeyFromObject(svc), fresh)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && fresh.UID != svc.UID):
		// Gone or replaced: its slices go with it (the garbage collector).
		return staleSlices(svc, slices, nodeLabels, false), nil
	case err != nil:
		return nil, fmt.Errorf("reading Service %s/%s from the API server: %w", svc.Namespace, svc.Name, err)
	}
	return staleSlices(fresh, slices, nodeLabels, true), nil
}

// missingNode reports whether an agent's slice of the Service names a node
// that nodeLabels lacks.
func missingNode(svc *corev1.Service, slices []discoveryv1.EndpointSlice, nodeLabels map[string]bool) bool {
	for i := range slices {
		node, hasNode := slices[i].Labels[endpoints.DefaultNodeLabel]
		if hasNode && !nodeLabels[node] && managedByAgent(&slices[i], svc.Name) {
			return true
		}
	}
	return false
}

// agentSlices lists, from reader, the agents' slices of a resource.
func agentSlices(ctx context.Context, reader client.Reader, key types.NamespacedName) ([]discoveryv1.EndpointSlice, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := reader.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: key.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
	}); err != nil {
		return nil, fmt.Errorf("listing the slices of %s: %w", key, err)
	}
	return list.Items, nil
}

// managedByAgent reports whether the slice is an swh agent's slice of the
// named resource: labels decide, never the name.
func managedByAgent(s *discoveryv1.EndpointSlice, service string) bool {
	return endpoints.ManagedBy(s, endpoints.Options{}) && s.Labels[discoveryv1.LabelServiceName] == service
}
