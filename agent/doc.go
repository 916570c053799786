// Package agent will hold swh-agent, the per-node agent: it probes the pods
// of its node and publishes those that pass as EndpointSlices, one per port
// per node. See issue 6 and DESIGN.md §1.
package agent
