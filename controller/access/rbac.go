package access

// What the access reconciler reads and writes (merged by `make generate`
// into the controller's ClusterRole). get on secrets is there only because
// the API server refuses to let anyone create a Role granting get on a
// Secret they cannot get themselves (the escalation check); the controller
// reads no Secret. Deleting is also what OwnerReferencesPermissionEnforcement
// asks for to set the owner references.
//
// +kubebuilder:rbac:groups=network.swh.dev,resources=servicewithhealthchecks,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// Reading back, updating and deleting are confined to the two names it
// manages (RBAC cannot confine create, list or watch by name), so the
// controller cannot rewrite other ConfigMaps, Roles or RoleBindings.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=list;watch;create
// +kubebuilder:rbac:groups="",resources=configmaps,resourceNames=swh-services,verbs=get;update;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=list;watch;create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,resourceNames=swh-agent-secrets,verbs=get;update;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
