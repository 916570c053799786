package publisher

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/endpoints"
)

// A probe target that starts (agent restart, probe edit, new pod) has no
// result yet. Its tracker starts from what is published, so that every
// endpoint keeps its ready/serving/terminating conditions until a new result
// differs: a port published passing (serving) passed every probe that gates
// it, so each of those probes passed. A probe with no such port starts
// failed, as kubelet starts readiness. Serving, not ready, is the verdict:
// a terminating pod is published not ready while it passes, and with
// publishNotReadyAddresses every pod is published ready. An endpoint a
// port's floor keeps (floor-open, floor-frozen, floor-held) did not pass:
// it starts failed, and the floor decides again whether it stays
// (portfloor.go).

// servingPorts maps each pod to the ports (by name) it is published on, and
// whether it serves there. own are the agent's slices of the resource (one
// port each); adopted are the built-in controller's slices of a Service
// being adopted (every port in each), which count only where the agent
// publishes nothing for that pod and port yet.
func servingPorts(own, adopted []discoveryv1.EndpointSlice) map[types.UID]map[string]bool {
	out := map[types.UID]map[string]bool{}
	reasons := reasonsByPort(own)
	// The default options are valid: no error.
	published, _ := endpoints.Read(own, endpoints.Options{})
	for _, p := range published {
		if p.Pod == nil {
			continue
		}
		if out[p.Pod.UID] == nil {
			out[p.Pod.UID] = map[string]bool{}
		}
		serving, seen := out[p.Pod.UID][p.Port]
		out[p.Pod.UID][p.Port] = p.Serving && (serving || !seen) && !keptByPortFloor(reasons[p.Port][p.Pod.Name])
	}
	for uid, ports := range builtinServing(adopted) {
		if out[uid] == nil {
			out[uid] = map[string]bool{}
		}
		for name, serving := range ports {
			if _, published := out[uid][name]; !published {
				out[uid][name] = serving
			}
		}
	}
	return out
}

// builtinServing reads the built-in controller's slices (every port in
// each, no node label: not the layout endpoints.Read reads). A pod serves
// on a port when every one of its endpoints there (one per address family)
// serves, as endpoints.Read decides for the agent's slices.
func builtinServing(slices []discoveryv1.EndpointSlice) map[types.UID]map[string]bool {
	out := map[types.UID]map[string]bool{}
	for i := range slices {
		s := &slices[i]
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				continue
			}
			if out[ep.TargetRef.UID] == nil {
				out[ep.TargetRef.UID] = map[string]bool{}
			}
			_, serving, _ := endpoints.Conditions(ep.Conditions)
			for _, port := range s.Ports {
				name := ""
				if port.Name != nil {
					name = *port.Name
				}
				prev, seen := out[ep.TargetRef.UID][name]
				out[ep.TargetRef.UID][name] = serving && (prev || !seen)
			}
		}
	}
	return out
}

// inferPassed reports whether probe i of a pod passed, judging from the
// ports it gates on that pod (gates and portNames in the order of the
// Service's ports) and where the pod is published serving.
func inferPassed(gates []endpoints.PortGate, portNames []string, i int, serving map[string]bool) bool {
	for j, gate := range gates {
		if gate.Port != 0 && gate.Probes.Has(i) && serving[portNames[j]] {
			return true
		}
	}
	return false
}
