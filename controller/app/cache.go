package app

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// trimNode keeps of a Node what the controllers read, before the cache
// stores it: its metadata without managed fields (the reconciler's
// metadata-only watch uses names and labels), its spec, and of its status
// the conditions (the Withdrawer's Ready) and addresses. The rest of the
// status (the images, volumes, capacity and node info every kubelet
// reports) is most of a Node's size and would sit in memory for every node
// of the cluster. Anything else (a metadata-only Node, a tombstone) passes
// with its managed fields stripped when it has them.
func trimNode(in any) (any, error) {
	if n, ok := in.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions, Addresses: n.Status.Addresses}
		return n, nil
	}
	if obj, err := meta.Accessor(in); err == nil && obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	return in, nil
}
