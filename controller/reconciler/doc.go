// Package reconciler is the swh controller's one reconciler. For every
// ServiceWithHealthchecks it
//
//   - server-side applies a Service of the same name with no selector that
//     carries the resource's Service spec, writing only when what the
//     controller owns differs from the wanted state;
//   - adopts an existing Service when the resource asks for it with the
//     network.swh.dev/adopt annotation, removing the selector and, once the
//     agents publish slices, the built-in EndpointSlice controller's slices;
//   - deletes the agents' slices that nobody will update any more (their node,
//     port or address family is gone);
//   - writes the status, aggregated from the agents' slices of all nodes,
//     only when it changes.
//
// The agents own the slices of their nodes; this package never writes one.
package reconciler
