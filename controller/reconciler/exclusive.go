package reconciler

import (
	"context"
	"fmt"
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// exclusiveLeases reads the Leases of a resource's exclusive ports from
// the cache, by Lease name; none without spec.exclusive.
func exclusiveLeases(ctx context.Context, c client.Reader, swh *swhv1alpha1.ServiceWithHealthchecks) (map[string]*coordinationv1.Lease, error) {
	if swh.Spec.Exclusive == nil {
		return nil, nil
	}
	list := &coordinationv1.LeaseList{}
	if err := c.List(ctx, list, client.InNamespace(swh.Namespace), client.MatchingLabels{swhv1alpha1.LabelExclusiveLease: swh.Name}); err != nil {
		return nil, fmt.Errorf("listing the Leases of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	out := map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], swh) {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out, nil
}

// withExclusive adds to a status the holder of each exclusive port and the
// ExclusivePortsHeld condition (which it removes without spec.exclusive):
// True when a pod holds every exclusive port, False naming the ports
// none holds and how many pods stand by on each.
func withExclusive(st swhv1alpha1.ServiceWithHealthchecksStatus, swh *swhv1alpha1.ServiceWithHealthchecks, leases map[string]*coordinationv1.Lease, slices []discoveryv1.EndpointSlice) swhv1alpha1.ServiceWithHealthchecksStatus {
	if swh.Spec.Exclusive == nil {
		meta.RemoveStatusCondition(&st.Conditions, swhv1alpha1.ConditionExclusivePortsHeld)
		return st
	}
	standby := standbyCounts(slices)
	var held, free []string
	for _, port := range swh.Spec.ExclusivePorts() {
		lease := leases[swhv1alpha1.ExclusiveLeaseName(swh.Name, port)]
		node, pod := "", ""
		if lease != nil && lease.Spec.HolderIdentity != nil {
			node, pod = *lease.Spec.HolderIdentity, lease.Annotations[swhv1alpha1.AnnotationHolderPod]
		}
		for i := range st.Ports {
			if st.Ports[i].Name == port.Name {
				st.Ports[i].Holder, st.Ports[i].HolderNode = pod, node
			}
		}
		ref := fmt.Sprintf("%q", swhv1alpha1.ExclusivePortKey(port))
		switch {
		case node != "":
			held = append(held, fmt.Sprintf("port %s: pod %s on node %s", ref, pod, node))
		case standby[port.Name] > 0:
			free = append(free, fmt.Sprintf("port %s (%d pods pass and wait for it)", ref, standby[port.Name]))
		default:
			free = append(free, fmt.Sprintf("port %s (no pod passes it)", ref))
		}
	}
	c := metav1.Condition{Type: swhv1alpha1.ConditionExclusivePortsHeld, ObservedGeneration: swh.Generation,
		Status: metav1.ConditionTrue, Reason: swhv1alpha1.ReasonHeld, Message: strings.Join(held, "; ")}
	if len(free) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, swhv1alpha1.ReasonNotHeld
		c.Message = "no holder on " + strings.Join(free, ", ")
	}
	c.Message = swhv1alpha1.TruncateMessage(c.Message, 1024)
	meta.SetStatusCondition(&st.Conditions, c)
	sort.Slice(st.Conditions, func(i, j int) bool { return st.Conditions[i].Type < st.Conditions[j].Type })
	return st
}

// standbyCounts counts, per port name, the pods the agents' reasons
// annotations say pass and stand by or wait for a handover.
func standbyCounts(slices []discoveryv1.EndpointSlice) map[string]int {
	pods := map[string]map[string]bool{} // a dual-stack pod has an entry per family's slice
	for i := range slices {
		reasons, err := swhv1alpha1.EndpointReasonsOf(slices[i].Annotations)
		if err != nil {
			continue
		}
		port, _ := endpoints.SlicePort(&slices[i])
		for pod, r := range reasons {
			if r.Reason == swhv1alpha1.ReasonExclusiveStandby || r.Reason == swhv1alpha1.ReasonExclusiveHandover {
				if pods[port] == nil {
					pods[port] = map[string]bool{}
				}
				pods[port][pod] = true
			}
		}
	}
	out := map[string]int{}
	for port, set := range pods {
		out[port] = len(set)
	}
	return out
}

// leaseOwner maps an exclusive port's Lease to its resource.
func leaseOwner(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[swhv1alpha1.LabelExclusiveLease]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}
