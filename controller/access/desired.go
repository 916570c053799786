package access

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// Names and labels of the objects the package manages.
const (
	// ServicesConfigMap lists the child Services of a namespace; the
	// admission policy's paramRef names it.
	ServicesConfigMap = "swh-services"
	// SecretsGrant names the Role and RoleBinding that let the agents read
	// a namespace's probe Secrets.
	SecretsGrant = "swh-agent-secrets"
	// LabelManagedBy and ManagedBy mark every object the package manages;
	// the controller's cache holds only objects with them.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "swh-controller"
)

// ParseServiceAccount reads "<namespace>/<name>".
func ParseServiceAccount(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return types.NamespacedName{}, fmt.Errorf("service account %q: want <namespace>/<name>", s)
	}
	for _, part := range []string{ns, name} {
		if errs := validation.IsDNS1123Subdomain(part); len(errs) > 0 {
			return types.NamespacedName{}, fmt.Errorf("service account %q: %q: %s", s, part, strings.Join(errs, "; "))
		}
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// serving returns the resources that count: not being deleted.
func serving(all []swhv1alpha1.ServiceWithHealthchecks) []*swhv1alpha1.ServiceWithHealthchecks {
	out := make([]*swhv1alpha1.ServiceWithHealthchecks, 0, len(all))
	for i := range all {
		if all[i].DeletionTimestamp.IsZero() {
			out = append(out, &all[i])
		}
	}
	slices.SortFunc(out, func(a, b *swhv1alpha1.ServiceWithHealthchecks) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// controls reports whether swh is the controller of svc: the child Service
// was created or adopted, not merely a Service of the same name.
func controls(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service) bool {
	ref := metav1.GetControllerOf(svc)
	return ref != nil && ref.UID == swh.UID && ref.Kind == kind && groupOf(ref.APIVersion) == swhv1alpha1.GroupVersion.Group
}

const kind = "ServiceWithHealthchecks"

func groupOf(apiVersion string) string {
	group, _, _ := strings.Cut(apiVersion, "/")
	return group
}

// controlledBySWH reports whether a Service's controller is a resource (of
// any UID): the Services whose events matter here.
func controlledBySWH(obj metav1.Object) bool {
	ref := metav1.GetControllerOfNoCopy(obj)
	return ref != nil && ref.Kind == kind && groupOf(ref.APIVersion) == swhv1alpha1.GroupVersion.Group
}

// secretNames returns the sorted, distinct Secrets the resources' PostgreSQL
// probes log in with, and the resources that name one.
func secretNames(swhs []*swhv1alpha1.ServiceWithHealthchecks) ([]string, []*swhv1alpha1.ServiceWithHealthchecks) {
	var names []string
	var users []*swhv1alpha1.ServiceWithHealthchecks
	for _, swh := range swhs {
		if swh.Spec.Healthcheck == nil {
			continue
		}
		uses := false
		for _, p := range swh.Spec.Healthcheck.Probes {
			if name := p.AuthSecretName(); name != "" {
				names = append(names, name)
				uses = true
			}
		}
		if uses {
			users = append(users, swh)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), users
}

// ownerRefs returns one owner reference per resource: not a controller one
// (several resources share the object), and not blocking their deletion.
func ownerRefs(swhs []*swhv1alpha1.ServiceWithHealthchecks) []metav1.OwnerReference {
	out := make([]metav1.OwnerReference, 0, len(swhs))
	for _, swh := range swhs {
		out = append(out, metav1.OwnerReference{
			APIVersion: swhv1alpha1.GroupVersion.String(), Kind: kind, Name: swh.Name, UID: swh.UID,
		})
	}
	return out
}

func objectMeta(ns, name string, owners []*swhv1alpha1.ServiceWithHealthchecks) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: ns, Name: name,
		Labels:          map[string]string{LabelManagedBy: ManagedBy},
		OwnerReferences: ownerRefs(owners),
	}
}

// desiredConfigMap lists the registered Services (name → Service UID).
func desiredConfigMap(ns string, swhs []*swhv1alpha1.ServiceWithHealthchecks, registered map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: objectMeta(ns, ServicesConfigMap, swhs), Data: registered}
}

func desiredRole(ns string, secrets []string, users []*swhv1alpha1.ServiceWithHealthchecks) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: objectMeta(ns, SecretsGrant, users),
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: secrets,
		}},
	}
}

func desiredRoleBinding(ns string, agent types.NamespacedName, users []*swhv1alpha1.ServiceWithHealthchecks) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(ns, SecretsGrant, users),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: SecretsGrant},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agent.Namespace, Name: agent.Name}},
	}
}
