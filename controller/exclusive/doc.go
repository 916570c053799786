// Package exclusive keeps the Leases of the resources' exclusive ports
// (spec.exclusive) and takes a port back from a holder that can no longer
// give it up.
//
// The agents hold the Leases: the agent of the node whose pod passes an
// exclusive port takes the port's free Lease, renews it, publishes that one
// pod, and frees the Lease once its slices withdraw the pod. The
// Reconciler here does what an agent cannot:
//
//  1. It creates one Lease per exclusive port, owned by the resource (the
//     garbage collector deletes them with it), keeps its duration in step
//     with spec.exclusive.leaseDurationSeconds, and deletes the Leases of
//     ports that stop being exclusive.
//  2. It frees an expired Lease: one whose holder has not renewed it for
//     its whole duration, counted on the controller's own clock from when
//     it last saw the Lease change (as client-go's leader election does,
//     so clocks need not agree). First it withdraws the holder node's
//     endpoints on the port (the node died, or its agent lost the API
//     server), then it frees the Lease with the resourceVersion it saw
//     expire: a holder that renewed meanwhile keeps it.
//  3. It withdraws an endpoint that a node not holding the port publishes
//     ready or serving there (an agent's write that landed late, say),
//     after reading the Lease from the API server to be sure.
//
// Every write carries the resourceVersion it was decided on, so a
// concurrent write by an agent makes it fail and the next pass decide
// again.
package exclusive
