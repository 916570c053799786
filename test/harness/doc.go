// Package harness runs the real parts the integration suites test against:
// kube-apiserver and etcd built from source (through envtest), Nodes and Pods
// whose status it writes as a kubelet would, real TCP, HTTP(S) and PostgreSQL
// servers listening on pod addresses, and the checks that a test runs inside
// the private network namespace of hack/netns.sh.
package harness
