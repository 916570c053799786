// Package nodehealth takes the endpoints of a node that is not Ready out of
// service. When a node loses power or its network, its agent cannot
// withdraw anything and its Node object stays; the node lifecycle
// controller only sets the node's Ready condition to Unknown. For plain
// Services that condition marks the node's pods not ready and the built-in
// EndpointSlice controller withdraws them; here the Withdrawer does the
// same to the agents' slices of that node: every endpoint becomes not
// serving (and not ready, unless the Service publishes not-ready
// addresses).
//
// The agent of a node that is not Ready publishes the same thing when it is
// alive, so the two writers agree; both update the whole slice with its
// resourceVersion, and a conflict makes the loser read again. When the node
// is Ready again its agent publishes what its probes say, and traffic
// returns. An agent that crashes on a Ready node changes nothing here.
package nodehealth
