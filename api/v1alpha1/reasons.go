package v1alpha1

// Every reason this API's users read: of the conditions of the resource and
// of its pods' readiness gates, of an endpoint that does not pass (the
// AnnotationEndpointReasons entries), and of the events the controller and
// the agent record. One file, so that one name always means one value.

// Reasons of the ServiceSynced condition. Each constant is named after its
// value, so a reason read in a status leads here. The controller also uses
// them as the reasons of the events it emits when the condition changes.
// (The reasons of EndpointReason, below, are another set: why a pod is not
// ready on a slice's port.)
const (
	// ReasonSynced (True): the child Service matches the spec.
	ReasonSynced = "Synced"
	// ReasonAdopting (True): an adopted Service's old slices, the built-in
	// controller's, stay until the agents publish a ready endpoint.
	ReasonAdopting = "Adopting"
	// ReasonServiceNotOwned (False): a Service of that name exists and the
	// resource does not control it (no AnnotationAdopt, or another
	// controller owns it). The controller leaves it alone.
	ReasonServiceNotOwned = "ServiceNotOwned"
	// ReasonAwaitingGarbageCollection (False): the Service of that name
	// is still controlled by a deleted ServiceWithHealthchecks of the same
	// name (the resource was deleted and created again at once: kubectl
	// replace --force, a GitOps tool). The garbage collector deletes it and
	// its slices; the controller then creates the Service again. Not a
	// Warning: it is how Kubernetes deletes dependents.
	ReasonAwaitingGarbageCollection = "AwaitingGarbageCollection"
	// ReasonServiceRejected (False): the API server refused the child
	// Service (the message says why). It is retried when the resource
	// changes; meanwhile the Service stays as last applied.
	ReasonServiceRejected = "ServiceRejected"
	// ReasonSelectorRemoved (False): someone added a selector to the child
	// Service; the controller removed it and deletes the built-in
	// controller's slices, which publish pods by readiness.
	ReasonSelectorRemoved = "SelectorRemoved"
	// ReasonServiceDrifted (False): the child Service differs from the spec
	// in a way the controller does not, or not yet, put back (a label that
	// hides it from kube-proxy, a change the API server refused to revert,
	// a field someone sets again as soon as it is removed).
	ReasonServiceDrifted = "ServiceDrifted"
	// ReasonForbidden (False): RBAC or an admission plugin refused a write
	// of the controller (the message has the API server's answer); retried
	// every minute and on changes.
	ReasonForbidden = "Forbidden"
)

// Reasons of the EndpointsAvailable condition, counted over the agents'
// slices of the resource.
const (
	// ReasonEndpointsReady (True): every published pod is ready on every
	// port.
	ReasonEndpointsReady = "EndpointsReady"
	// ReasonSomeEndpointsNotReady (True): at least one port has a ready
	// pod, but some pods are not ready on every port.
	ReasonSomeEndpointsNotReady = "SomeEndpointsNotReady"
	// ReasonNoReadyEndpoints (False): pods are published, none is ready on
	// any port.
	ReasonNoReadyEndpoints = "NoReadyEndpoints"
	// ReasonNoEndpoints (False): no pod is published (yet).
	ReasonNoEndpoints = "NoEndpoints"
)

// Reasons of the readiness gate pod condition.
const (
	// ReasonProbesPassed (True): the pod passes the probes of every port.
	ReasonProbesPassed = "ProbesPassed"
	// ReasonProbesPassedOnce (True, mode Once): the pod passed them once;
	// later failures act on their ports only.
	ReasonProbesPassedOnce = "ProbesPassedOnce"
	// ReasonProbesNotPassed (False): some port's probes do not pass yet
	// (the message names the ports).
	ReasonProbesNotPassed = "ProbesNotPassed"
)

// Reasons of EndpointReason that are not probe failure reasons (those are
// the probes module's, e.g. "refused", "timeout", "status").
const (
	// ReasonPending: the probe has no verdict yet (a new pod, or an agent
	// that just started).
	ReasonPending = "pending"
	// ReasonRecovering: the probe passes again, not yet successThreshold
	// times.
	ReasonRecovering = "recovering"
	// ReasonPodNotReady: no probe gates the port and the pod is not Ready.
	ReasonPodNotReady = "pod-not-ready"
	// ReasonTerminating: the pod is being deleted; it serves while it
	// passes.
	ReasonTerminating = "terminating"
	// ReasonNoTargetPort: the port's targetPort names no port of the pod.
	ReasonNoTargetPort = "no-target-port"
	// ReasonNodeNotReady: the node is not Ready, so nothing on it passes.
	ReasonNodeNotReady = "node-not-ready"
	// ReasonExclusiveStandby: the port is exclusive and another pod holds
	// it; this one passes and stands by.
	ReasonExclusiveStandby = "exclusive-standby"
	// ReasonExclusiveHandover: this pod's agent holds the exclusive port's
	// Lease and waits for another node's endpoint to be withdrawn.
	ReasonExclusiveHandover = "exclusive-handover"
	// ReasonExclusiveNoLease: the exclusive port's Lease cannot be held:
	// the controller has not created it yet, or the agent failed to renew
	// it in time.
	ReasonExclusiveNoLease = "exclusive-no-lease"
	// ReasonReplicationLagKept: the pod fails the port only for its
	// replication lag and is published ready anyway, because fewer pods
	// than the probe's maxReplicationLag.keepAtLeast pass the port.
	ReasonReplicationLagKept = "replication-lag-kept"
	// ReasonMaintenance: the pod's maintenance annotation takes it out of
	// the port on purpose (AnnotationMaintenance).
	ReasonMaintenance = "maintenance"
	// ReasonFailStatic: the pod fails a probe of the port and is kept
	// published ready, because the failure points at the checker (the
	// probe cannot run, every pod of the node fails it the same way, or
	// every probe of the node gets no answer); the message says which.
	ReasonFailStatic = "fail-static"
	// ReasonFloorOpen: the pod is published ready on the port, passing or
	// not, because the port's floor (spec.ports[].floor) is Open and fewer
	// pods than its minPassing pass the port across the cluster.
	ReasonFloorOpen = "floor-open"
	// ReasonFloorFrozen: the pod fails the port and stays published ready
	// because the port's floor is Freeze and fewer pods than its
	// minPassing pass the port across the cluster: the pods published
	// ready when it went below stay.
	ReasonFloorFrozen = "floor-frozen"
	// ReasonFloorHeld: the pod fails the port, whose floor is Open or
	// Freeze, and stays published ready a moment (the probes' timeout and
	// a second at most) while the agents count the pods that pass it
	// across the cluster: pods of two nodes failing together must not
	// each count the other's as passing.
	ReasonFloorHeld = "floor-held"
)

// Reasons of the events the eviction guard records on a resource.
const (
	// ReasonEvictionAllowed (Normal): an eviction took one of the budget's
	// disruptions.
	ReasonEvictionAllowed = "EvictionAllowed"
	// ReasonEvictionDenied (Warning): an eviction would have broken the
	// budget; the caller was told to retry (HTTP 429).
	ReasonEvictionDenied = "EvictionDenied"
)

// Reasons of the events the controller and the agent record besides the
// conditions' (whose changes are recorded with the condition's reason).
// Each constant is named after its value.
const (
	// EventReasonEndpointReady (Normal, agent): a pod became ready on
	// some ports; the action names them.
	EventReasonEndpointReady = "EndpointReady"
	// EventReasonEndpointNotReady (Warning, agent; Normal for a start
	// state): a pod is not ready on some ports, or for a new reason.
	EventReasonEndpointNotReady = "EndpointNotReady"
	// EventReasonSliceNameTaken (Warning, agent): a slice name the agent
	// wanted is held by a slice it does not own; it publishes under
	// another name.
	EventReasonSliceNameTaken = "SliceNameTaken"
	// EventReasonTLSModeConflict (Warning, agent): a PostgreSQL probe sets
	// a tlsMode and its credentials Secret holds another; the spec's is
	// used.
	EventReasonTLSModeConflict = "TLSModeConflict"
	// EventReasonProbeMisconfigured (Warning, agent): a probe cannot run
	// as written (the note says why).
	EventReasonProbeMisconfigured = "ProbeMisconfigured"
	// EventReasonServiceDriftReverted (Warning, controller): the controller
	// put back what someone else changed on a child Service.
	EventReasonServiceDriftReverted = "ServiceDriftReverted"
	// EventReasonNodeNotReady (Warning, controller): a node is not Ready,
	// so the controller withdrew the resource's endpoints on it (the
	// endpoint reason is then ReasonNodeNotReady, node-not-ready).
	EventReasonNodeNotReady = "NodeNotReady"
	// EventReasonExclusivePortHeld (Normal, agent): a node's agent took
	// an exclusive port's Lease, or moved it to another pod of its node.
	EventReasonExclusivePortHeld = "ExclusivePortHeld"
	// EventReasonExclusiveLeaseExpired (Warning, controller): the holder
	// of an exclusive port stopped renewing its Lease; the controller
	// withdrew its endpoint and freed the Lease.
	EventReasonExclusiveLeaseExpired = "ExclusiveLeaseExpired"
	// EventReasonExclusiveEndpointWithdrawn (Warning, controller): a node
	// that does not hold an exclusive port published a pod ready on it;
	// the controller withdrew it.
	EventReasonExclusiveEndpointWithdrawn = "ExclusiveEndpointWithdrawn"
	// EventReasonExclusiveLeaseTaken (Warning, controller): a Lease with
	// the name of an exclusive port's exists and is not the resource's;
	// the port cannot be held until it is deleted.
	EventReasonExclusiveLeaseTaken = "ExclusiveLeaseTaken"
	// EventReasonFailingStatic (Warning, agent): endpoints of the node
	// fail their probes and stay published, because the failures point at
	// the checker (endpoint reason ReasonFailStatic).
	EventReasonFailingStatic = "FailingStatic"
	// EventReasonFailStaticEnded (Normal, agent): no endpoint of the node
	// is kept that way any more.
	EventReasonFailStaticEnded = "FailStaticEnded"
	// EventReasonSessionsClosed (Normal, agent): the agent ended the
	// clients' sessions on a PostgreSQL pod it withdrew (closeSessions).
	EventReasonSessionsClosed = "SessionsClosed"
	// EventReasonSessionsNotClosed (Warning, agent): it could not.
	EventReasonSessionsNotClosed = "SessionsNotClosed"
)

// Condition ExclusivePortsHeld and its reasons, on resources with
// spec.exclusive.
const (
	// ConditionExclusivePortsHeld is True when a pod holds every
	// exclusive port.
	ConditionExclusivePortsHeld = "ExclusivePortsHeld"
	// ReasonHeld (True): every exclusive port has a holder.
	ReasonHeld = "Held"
	// ReasonNotHeld (False): some exclusive port has no holder, so no
	// pod is ready on it.
	ReasonNotHeld = "NotHeld"
)
