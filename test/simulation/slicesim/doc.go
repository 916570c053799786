// Package slicesim simulates what the EndpointSlice layout of swh costs a
// large cluster, side by side with the layout of Kubernetes' built-in
// EndpointSlice controller and with a candidate "grouped" layout.
//
// Nothing here talks to an API server. A seeded generator makes a cluster
// (nodes, resources shaped like Deployments and DaemonSets, pods with IPs);
// each layout turns it into the EndpointSlices it would write:
//
//   - ours: the endpoints library, as the agent calls it (NewGrouping,
//     Verdicts, Build, Plan), one scope per resource and node, with the
//     reasons and trigger-time annotations the agent adds; a node failure is
//     the controller's endpoints.Withdraw;
//   - builtin: k8s.io/endpointslice's Reconciler, the code of
//     kube-controller-manager's EndpointSlice controller, whose writes land
//     in a fake clientset used only as a sink;
//   - grouped: ours with the nodes of a resource hashed into a bounded number
//     of groups above a threshold, one slice per port per group.
//
// Every object written is measured as the API server would handle it: with
// the metadata it adds (uid, resourceVersion, creationTimestamp,
// generation, one managedFields entry), encoded as protobuf the way it is
// stored in etcd, framed as the watch event each kube-proxy receives, and as
// JSON for reference. The scenarios are the steady state, one endpoint
// change, a rolling update and a node failure (see Run).
package slicesim
