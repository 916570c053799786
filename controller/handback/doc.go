// Package handback gives every ServiceWithHealthchecks' Service back to
// Kubernetes before swh is uninstalled: the reverse of an adoption, so
// that removing swh changes no traffic (the chart runs it as a pre-delete
// hook: swh-controller hand-back).
//
// Without it, an uninstall leaves every child Service without a selector
// and its endpoints frozen as the agents last published them, unprobed;
// and deleting the CRD later garbage-collects every child Service. Run
// does, in order:
//
//  1. scales the controller to zero and waits for its pods to go, so that
//     nothing puts a Service back as the controller wants it;
//  2. for each resource whose Service it owns: one patch of the Service
//     that drops the resource's owner reference (the Service survives the
//     resource and the CRD) and swh's label (the agents let it go), and
//     sets the resource's selector (kube-controller-manager's EndpointSlice
//     controller publishes the selected pods by their Ready condition);
//  3. waits until the built-in slices list, ready, every pod the agents'
//     slices list ready on each port (or a timeout), then deletes the
//     agents' slices: kube-proxy merges the slices of a Service, so the two
//     sets overlap and no request finds no endpoint;
//  4. deletes the per-namespace registry objects of package access (the
//     ConfigMaps swh-services, the Roles and RoleBindings
//     swh-agent-secrets).
//
// The resources stay, inert (ServiceNotOwned once a controller runs
// again); annotating them network.swh.dev/adopt=true after a reinstall
// takes the Services back.
package handback
