// Package access keeps, in every namespace with ServiceWithHealthchecks,
// the two objects that confine the agents to what they need there:
//
//   - the ConfigMap swh-services, one key per child Service the controller
//     owns in the namespace (value: the Service's UID). The chart's
//     ValidatingAdmissionPolicy takes it as its params and lets an agent
//     write an EndpointSlice only for a Service listed in it, and owned by
//     that Service (that UID), so a compromised node cannot publish
//     addresses in kube-dns or a tenant's plain Service, nor keep a slice
//     past its Service for a later one of the same name. A Service is
//     listed once the controller owns it (created or adopted), with its new
//     UID once re-created, and no longer once the resource goes or the
//     controller stops owning it;
//   - the Role and RoleBinding swh-agent-secrets, granting the agents'
//     ServiceAccount get on exactly the Secrets the namespace's PostgreSQL
//     probes name in authSecretName, instead of every Secret of the cluster.
//
// Each object carries one (non-controller) owner reference per resource it
// serves, so the garbage collector removes it with the last one even while
// the controller is down; the controller also removes what no resource needs
// any more (a labelled one in a namespace without resources too), clearing
// any finalizer someone added so that it does not stay Terminating and in
// force, and puts back whatever someone else changed or deleted (it watches
// the objects it manages, and only those: its cache selects them by the
// label app.kubernetes.io/managed-by=swh-controller).
//
// Every write sends a whole object, and a namespace's registry grows with
// its resources, so a namespace's writes are spaced (GapPerService): a mass
// creation costs a bounded number of bytes per second, not a write of the
// whole registry per resource.
//
// Granting get on a Secret in a Role requires holding it (RBAC's escalation
// check), so the controller holds get on secrets, never list or watch, and
// neither escalate nor bind.
package access
