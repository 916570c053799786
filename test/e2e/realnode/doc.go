// Package realnode runs a Kubernetes cluster of real nodes on one machine
// for the real-node suite: kube-apiserver and etcd (test/harness),
// kube-scheduler and kube-controller-manager with their default
// controllers, and per node an upstream kubelet with Debian's containerd and
// runc, the CNI ptp and host-local plugins, and a kube-proxy, with the
// images of make images imported into each node's containerd.
//
// Everything lives inside the private network namespace of hack/netns.sh:
// each node has a network namespace of its own on a bridge (so it has its
// own kube-proxy and can be cut off alone) and a mount and PID namespace,
// its "machine", where /var and /run are private folders, the global
// sysctls kubelet writes are shadowed, and containerd, kubelet and every
// container run; killing the machine's first process is a power cut.
// Cluster.Check proves that nothing is left on the host: processes, links,
// cgroups, files under /var or /run, and the host's sysctls unchanged.
package realnode
