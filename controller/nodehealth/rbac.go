package nodehealth

// The Withdrawer reads nodes and the child Services, and updates the agents'
// slices of a node that is not Ready (merged by `make generate` into the
// controller's ClusterRole).
//
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=network.swh.dev,resources=servicewithhealthchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
