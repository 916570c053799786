// Package reconciler holds two of the swh controller's five reconcilers
// (the others: package access grants the agents their namespaces,
// nodehealth withdraws the endpoints of nodes that are not Ready, and
// disruption keeps the budgets' status). For every ServiceWithHealthchecks,
// Reconciler
//
//   - server-side applies a Service of the same name with no selector that
//     carries the resource's Service spec, writing only when what the
//     controller owns differs from the wanted state;
//   - adopts an existing Service when the resource asks for it with the
//     network.swh.dev/adopt annotation, removing the selector and, once the
//     agents publish slices, the built-in EndpointSlice controller's slices;
//   - puts back what someone else changed on the child Service that changes
//     traffic (a selector, ports, type, traffic policies, …: server-side
//     apply alone leaves fields it does not own), deleting the built-in
//     controller's slices after a selector, and reports a
//     service.kubernetes.io/service-proxy-name label it does not set. What
//     its own apply set is never such a change: the apply removes what the
//     spec drops, and while the API server refuses the spec only a selector
//     is removed. A field is put back at most once per interval (doubling
//     while it keeps coming back), and one that a mutating admission puts
//     back on the controller's own patch is reported, not fought;
//   - reports a write that RBAC or an admission plugin forbids in the status
//     and an event, and retries it every minute;
//   - writes the status, aggregated from the agents' slices of all nodes,
//     only when it changes.
//
// and StaleSlices deletes the agents' slices that nobody will update any
// more: their node is gone, or their port or address family is no longer
// the child Service's (the agents publish what the Service says, not the
// spec). It judges ports and families against the Service as the API
// server has it, and not while the status says the spec or a write was
// refused; a deletion it may not make is an event, retried every minute.
//
// The agents own the slices of their nodes; this package never creates or
// updates one, and deletes only those no agent will update any more.
package reconciler
