package v1alpha1

// Condition types of ServiceWithHealthchecksStatus. The controller sets
// both on every resource it reconciles.
const (
	// ConditionServiceSynced is True when the child Service matches the spec.
	ConditionServiceSynced = "ServiceSynced"
	// ConditionEndpointsAvailable is True when at least one endpoint is ready.
	ConditionEndpointsAvailable = "EndpointsAvailable"
)
