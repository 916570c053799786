// Package disruption is the eviction guard: a validating admission webhook
// on pods/eviction that refuses (HTTP 429, which kubectl drain retries) an
// eviction that would leave fewer pods passing their probes than a
// resource's spec.disruptionBudget requires. A PodDisruptionBudget counts
// pods that are Ready; a stateful member can be Ready while it still
// catches up, and a drain then takes a second one. Here a pod counts as
// available only when the agents publish it ready on the budget's ports, on
// a Ready node with a live agent.
//
// Decisions are race-free across guard replicas the way kube-apiserver's
// eviction of a PodDisruptionBudget is: an allowed eviction is recorded as
// a reservation in the resource's status, written with the resourceVersion
// read as a precondition and decided again on conflict, so two evictions
// arriving at two replicas cannot both take the last disruption. A
// reservation counts its pod as unavailable until the pod is terminating or
// gone, or until it expires (an eviction the API server refused after the
// guard allowed it). The StatusReconciler keeps status.disruption current
// between evictions and drops finished reservations.
package disruption
