package v1alpha1

// Condition types of ServiceWithHealthchecksStatus. The controller sets
// both on every resource it reconciles.
const (
	// ConditionServiceSynced is True when the child Service matches the spec.
	ConditionServiceSynced = "ServiceSynced"
	// ConditionEndpointsAvailable is True when at least one endpoint is ready.
	ConditionEndpointsAvailable = "EndpointsAvailable"
)

// Condition FailingStatic and its reason. The controller sets it only
// while it is True, and removes it when no endpoint is kept that way.
const (
	// ConditionFailingStatic is True while some node's agent keeps
	// endpoints of the resource published although their probes fail,
	// because the failures point at the checker (the endpoint reason
	// ReasonFailStatic); the message names the nodes.
	ConditionFailingStatic = "FailingStatic"
	// ReasonCheckerSuspected (True): see ConditionFailingStatic.
	ReasonCheckerSuspected = "CheckerSuspected"
)

// Condition FloorEngaged and its reason. The controller sets it only
// while it is True, and removes it when no port is below its floor.
const (
	// ConditionFloorEngaged is True while some port whose floor is Open
	// or Freeze (spec.ports[].floor) has fewer passing pods than its
	// minPassing across the cluster, and the agents keep pods published
	// ready on it despite their probes (endpoint reasons ReasonFloorOpen,
	// ReasonFloorFrozen); the message names the ports, their mode and
	// how many pods are kept.
	ConditionFloorEngaged = "FloorEngaged"
	// ReasonBelowMinPassing (True): see ConditionFloorEngaged.
	ReasonBelowMinPassing = "BelowMinPassing"
)
