package endpoints

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// NodeNotReady reports whether a node's Ready condition is present and not
// True: Unknown, as the node lifecycle controller sets it when the node
// stops reporting, or False. The pods of such a node get no traffic, as a
// plain Service's would once their Ready condition is cleared. A node with
// no Ready condition yet is not judged.
func NodeNotReady(node *corev1.Node) bool {
	if node == nil {
		return false
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return node.Status.Conditions[i].Status != corev1.ConditionTrue
		}
	}
	return false
}

// Withdraw marks every endpoint of a slice the way Build publishes a pod
// that passes no probe: not serving, and not ready unless the Service
// publishes not-ready addresses; terminating stays as it is. It is for a
// writer that takes a node's endpoints out of service without probing them
// (the node is not Ready, say) and returns whether anything changed.
func Withdraw(s *discoveryv1.EndpointSlice, publishNotReadyAddresses bool) bool {
	changed := false
	for i := range s.Endpoints {
		c := &s.Endpoints[i].Conditions
		ready := publishNotReadyAddresses
		if c.Ready == nil || *c.Ready != ready {
			c.Ready = &ready
			changed = true
		}
		if c.Serving == nil || *c.Serving {
			serving := false
			c.Serving = &serving
			changed = true
		}
	}
	return changed
}
