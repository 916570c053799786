package disruption

// The guard reads the evicted pod and the pods a budget selects, anywhere,
// and how many of them to expect: the metadata of their ReplicaSets (to
// find a Deployment) and the /scale of their controllers; it watches
// pods only in its own namespace (the agents', whose readiness says a
// node's verdicts are current). Like kube's disruption controller, it
// reads the /scale of any kind that controls a selected pod. It writes
// the resources' status and events with the reconciler's rules.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch,namespace=swh-system
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=get
// +kubebuilder:rbac:groups=*,resources=*/scale,verbs=get
