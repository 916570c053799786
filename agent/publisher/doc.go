// Package publisher is the swh agent's core: for every ServiceWithHealthchecks
// it runs one probe job per probe and pod of its node (through the probes
// module's scheduler and threshold trackers), turns the verdicts into
// EndpointSlices with the endpoints module, and writes only what changed.
//
// Verdict changes are coalesced for a short window, so a mass failure costs
// one write per slice; pod events (a pod starting to terminate, a new IP)
// are published at once; a restarted agent starts every target that is
// published ready as healthy, so a restart never withdraws traffic.
package publisher
