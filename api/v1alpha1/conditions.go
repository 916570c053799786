package v1alpha1

// Condition types of ServiceWithHealthchecksStatus. The controller sets
// both on every resource it reconciles.
const (
	// ConditionServiceSynced is True when the child Service matches the spec.
	ConditionServiceSynced = "ServiceSynced"
	// ConditionEndpointsAvailable is True when at least one endpoint is ready.
	ConditionEndpointsAvailable = "EndpointsAvailable"
)

// Reasons of the ServiceSynced condition. Each constant is named after its
// value, so a reason read in a status leads here. The controller also uses
// them as the reasons of the events it emits when the condition changes.
// (The reasons of EndpointReason, in endpoint_reasons.go, are another set:
// why a pod is not ready on a slice's port.)
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
