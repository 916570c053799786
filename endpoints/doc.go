// Package endpoints turns "these pods on this node passed these probes" into
// the EndpointSlices that publish them, for Services whose endpoints are
// gated by active probes rather than pod readiness. It does no I/O: the
// caller lists, probes and writes; this package decides.
//
// It has four parts, used in this order by a node agent:
//
//   - Grouping decides which probes gate which Service port. A probe whose
//     target port is a port's targetPort gates that port only; a probe
//     matching no port gates every port of the pod; several probes on one
//     port must all pass; a port gated by no probe follows pod readiness.
//     Names on either side resolve against the pod's container ports, so the
//     pod-independent part is computed once (NewGrouping) and each pod costs
//     a few comparisons (Grouping.Verdicts), with probes held in a ProbeSet
//     bitset.
//   - SliceName and NodeLabelValue name slices and label them by node,
//     predictably: "<service>-<port>-<node>", "<service>-<node>" for a single
//     unnamed port, with suffixes for the secondary address family, extra
//     port numbers and overflow beyond 1000 endpoints (see NameParts).
//   - Build makes the desired slices of one Service on one node from the
//     pods' verdicts: one slice per port and family, with the labels kube-proxy
//     and the agent need, an owner reference to the Service, and per endpoint
//     the address, nodeName, zone, targetRef and ready/serving/terminating.
//   - UpToDate and Plan compare desired slices with those read from the API
//     server, ignoring what the server defaults, and return the creates,
//     updates and deletes, never touching a slice another Service, manager or
//     node owns and moving aside from names such slices hold.
//
// Read is Build's inverse for every reader of published slices (a status,
// a disruption budget, a CLI): one Published per port, pod and node, with
// the rules decided once. A nil ready or serving condition reads as true
// and a nil terminating as false, as the EndpointSlice API says and
// kube-proxy reads them; a pod published in two address families is ready
// and serving only when both entries are; a slice speaks only for the node
// it is labelled for. Published.Available (serving and not terminating) is
// the probes' verdict whatever publishNotReadyAddresses says.
//
// NodeNotReady and Withdraw serve a writer that takes the endpoints of a
// node that is not Ready out of service without probing them: Withdraw
// marks a slice's endpoints as Build would for pods passing no probe.
//
// A sync of one Service on one node:
//
//	g, err := endpoints.NewGrouping(svc.Spec.Ports, probeTargets) // once per spec
//	pods := make([]endpoints.PodVerdicts, 0, len(nodePods))
//	for _, pod := range nodePods {
//		pods = append(pods, endpoints.PodVerdicts{Pod: pod, Ports: g.Verdicts(pod, passing[pod.UID])})
//	}
//	desired, err := endpoints.Build(endpoints.ServiceFrom(svc), endpoints.NodeFrom(node), pods, endpoints.Options{})
//	changes, err := endpoints.Plan(endpoints.Scope{Namespace: ns, Service: svc.Name, Node: node.Name}, existing, desired, endpoints.Options{})
//	// create changes.Create, update changes.Update, delete changes.Delete, report changes.Collisions
//
// The package depends only on k8s.io/api and k8s.io/apimachinery.
package endpoints
