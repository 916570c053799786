package exclusive

// The Reconciler reads the resources, creates, updates and deletes the
// exclusive ports' Leases in any namespace, and withdraws the agents'
// endpoints on them (merged by `make generate` into the controller's
// ClusterRole).
//
// +kubebuilder:rbac:groups=network.swh.dev,resources=servicewithhealthchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
