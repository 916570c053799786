package webhookcert

// The Rotator creates and updates its Secret in the controller's namespace
// (get on secrets is granted cluster-wide for the agents' grants, package
// access), and reads and updates the one webhook configuration it keeps
// the caBundle of: swh-eviction-guard here, which the chart renames to
// <fullname>-eviction-guard.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update,namespace=swh-system
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,resourceNames=swh-eviction-guard,verbs=get;update
