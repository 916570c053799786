// Package kubectlswh is the kubectl plugin kubectl-swh: it tells an
// operator, with read access to the API alone (no exec, no port-forward to
// nodes), which pod receives traffic on which port of a
// ServiceWithHealthchecks, and why not.
//
// It reads what the agents publish: the EndpointSlices of the resource,
// whose network.swh.dev/endpoint-reasons annotation says why each endpoint
// that does not pass is out (written only when a reason changes), the
// selected pods, their nodes and the agent pods of those nodes.
//
// The commands are cobra's, with kubectl's flags and printers from
// k8s.io/cli-runtime (command.go); NewCommand builds them, Run runs them.
//
//	kubectl swh status NAME [-n NAMESPACE] [-o text|wide|json|yaml|jsonpath=...]
//	kubectl swh status [-n NAMESPACE | -A]
//	kubectl swh why NAME POD [-n NAMESPACE] [-o text|json|yaml|jsonpath=...]
package kubectlswh
