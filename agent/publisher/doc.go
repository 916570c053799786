// Package publisher is the swh agent's core: for every ServiceWithHealthchecks
// it runs one probe job per probe and pod of its node (through the probes
// module's scheduler and threshold trackers), turns the verdicts into
// EndpointSlices with the endpoints module, and writes only what changed.
//
// Verdict changes are coalesced for a short window, so a mass failure costs
// one write per slice; pod events (a pod starting to terminate, a new IP)
// are published at once; a restarted agent starts every target that is
// published ready as healthy, so a restart never withdraws traffic.
//
// A reconcile (Reconcile, publisher.go) is a pipeline of stages, each in a
// file of its name: read (read.go) the resource, its Service, the node, the
// pods and the slices; sync the probe targets (targetsync.go, over the
// table of targets.go, started from what is published: startstate.go, at
// the resource's phase: phase.go); turn the targets' state into verdicts
// and causes per pod and port (verdicts.go); keep replicas that only lag
// under a port's floor (lagfloor.go); publish, on a port below its
// floor, what its mode says (portfloor.go); hold the exclusive ports'
// Leases, one pod of the cluster passing each (exclusive.go); build, annotate (reasons.go),
// plan and write the slices (publish.go); emit the events the stages
// returned (events.go; what changed on the slices is news: news.go); sync
// the readiness gates (readinessgate.go). Probe results arrive on the
// probes' goroutines (results.go) and reach the controller's queue through
// flipqueue.go. Probers and their credentials: probers.go, secrets.go,
// tlsmode.go; slice names another slice holds: collisions.go.
package publisher
