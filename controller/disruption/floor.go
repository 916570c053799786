package disruption

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// floorKey is a pod's endpoints on a port in the slices of one node, by
// the node's label value.
type floorKey struct {
	port, node, pod string
}

// floorKept finds the endpoints a floor keeps published although they do
// not pass (swhv1alpha1.KeptByFloor: a port's floor below its
// minPassing, a pod held while the agents count, a lag floor): they serve,
// yet their pods are not available for a budget, which counts the pods
// that pass. Otherwise a drain would take pods while the port is already
// below its floor.
func floorKept(slices []discoveryv1.EndpointSlice) map[floorKey]bool {
	out := map[floorKey]bool{}
	for i := range slices {
		reasons, err := swhv1alpha1.EndpointReasonsOf(slices[i].Annotations)
		if err != nil {
			continue
		}
		port, _ := endpoints.SlicePort(&slices[i])
		node := slices[i].Labels[endpoints.DefaultNodeLabel]
		for pod, r := range reasons {
			if swhv1alpha1.KeptByFloor(r.Reason) {
				out[floorKey{port: port, node: node, pod: pod}] = true
			}
		}
	}
	return out
}

// keptByFloor reports whether p is one of kept.
func keptByFloor(kept map[floorKey]bool, p endpoints.Published) bool {
	return p.Pod != nil && kept[floorKey{port: p.Port, node: endpoints.NodeLabelValue(p.Node), pod: p.Pod.Name}]
}

// keptPods are the pods with an endpoint a floor keeps, on their own
// node's slices.
func keptPods(slices []discoveryv1.EndpointSlice) map[types.UID]bool {
	kept := floorKept(slices)
	published, _ := endpoints.Read(slices, endpoints.Options{}) // valid options: no error
	out := map[types.UID]bool{}
	for _, p := range published {
		if keptByFloor(kept, p) && p.Pod.UID != "" {
			out[p.Pod.UID] = true
		}
	}
	return out
}
