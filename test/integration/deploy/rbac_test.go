package deploy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/swh-dev/swh/test/harness"
)

// access is one request a ServiceAccount may or may not make. Namespace ""
// asks for every namespace (a cluster-wide list or watch, or a
// cluster-scoped resource); appNS stands for any user's namespace.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

const appNS = "shop"

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	where := "cluster-wide"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	return fmt.Sprintf("%s %s %s", a.verb, r, where)
}

const (
	swhGroup = "network.swh.dev"
	swhRes   = "servicewithhealthchecks"
)

// needs lists, per ServiceAccount, every request its binary makes (from
// its code: caches, direct reads, writes, events, leader election). Each
// must be allowed, and every rule of its roles must be on this list.
var needs = map[string][]access{
	controllerSA: {
		// The resources it reconciles (cache), and their status.
		{verb: "list", group: swhGroup, resource: swhRes},
		{verb: "watch", group: swhGroup, resource: swhRes},
		{verb: "get", group: swhGroup, resource: swhRes, namespace: appNS},
		{verb: "update", group: swhGroup, resource: swhRes, subresource: "status", namespace: appNS},
		// With OwnerReferencesPermissionEnforcement: the child Service's
		// owner reference blocks the resource's deletion.
		{verb: "update", group: swhGroup, resource: swhRes, subresource: "finalizers", namespace: appNS},
		// The child Services: cached, server-side applied (create and
		// patch), their selector removed on adoption and what others
		// changed put back (merge patch); delete only for
		// OwnerReferencesPermissionEnforcement, which asks for it to set an
		// owner reference on an existing Service (adoption).
		{verb: "list", resource: "services"},
		{verb: "watch", resource: "services"},
		{verb: "get", resource: "services", namespace: appNS},
		{verb: "create", resource: "services", namespace: appNS},
		{verb: "patch", resource: "services", namespace: appNS},
		{verb: "delete", resource: "services", namespace: appNS},
		// The agents' slices (cache), built-in slices listed and deleted on adoption.
		{verb: "list", group: "discovery.k8s.io", resource: "endpointslices"},
		{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"},
		{verb: "get", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		{verb: "delete", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		// The agents' slices of a node that is not Ready: withdrawn.
		{verb: "update", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		// Nodes: gone ones' slices are collected, not Ready ones' withdrawn.
		{verb: "list", resource: "nodes"},
		{verb: "watch", resource: "nodes"},
		{verb: "get", resource: "nodes", name: "node-a"},
		// Whether an adopted Service still selects pods; the eviction
		// guard's evicted pod and the pods a budget selects, read from the
		// API server; the agents' pods, watched in its own namespace only.
		{verb: "list", resource: "pods", namespace: appNS},
		{verb: "get", resource: "pods", namespace: appNS},
		{verb: "watch", resource: "pods", namespace: namespace},
		// How many pods a budget expects: a ReplicaSet's metadata (its
		// Deployment), and the /scale of any kind controlling a pod, as
		// kube's disruption controller reads them.
		{verb: "get", group: "apps", resource: "replicasets", namespace: appNS},
		{verb: "get", group: "apps", resource: "deployments", subresource: "scale", namespace: appNS},
		{verb: "get", group: "apps", resource: "statefulsets", subresource: "scale", namespace: appNS},
		{verb: "get", group: "postgresql.cnpg.io", resource: "clusters", subresource: "scale", namespace: appNS},
		{verb: "get", group: "*", resource: "*", subresource: "scale", namespace: appNS},
		// The built-in controller's Endpoints, deleted on adoption.
		{verb: "get", resource: "endpoints", namespace: appNS},
		{verb: "delete", resource: "endpoints", namespace: appNS},
		// Events about the resources.
		{verb: "create", group: "events.k8s.io", resource: "events", namespace: appNS},
		{verb: "patch", group: "events.k8s.io", resource: "events", namespace: appNS},
		// The agents' grants (package access): the ConfigMap swh-services
		// and the Role and RoleBinding swh-agent-secrets of each namespace
		// with resources, cached by label, written and deleted; get on
		// Secrets because RBAC's escalation check refuses a Role granting
		// get on a Secret to whoever cannot get it.
		{verb: "list", resource: "configmaps"},
		{verb: "watch", resource: "configmaps"},
		{verb: "get", resource: "configmaps", namespace: appNS, name: "swh-services"},
		{verb: "create", resource: "configmaps", namespace: appNS},
		{verb: "update", resource: "configmaps", namespace: appNS, name: "swh-services"},
		{verb: "delete", resource: "configmaps", namespace: appNS, name: "swh-services"},
		{verb: "list", group: "rbac.authorization.k8s.io", resource: "roles"},
		{verb: "watch", group: "rbac.authorization.k8s.io", resource: "roles"},
		{verb: "get", group: "rbac.authorization.k8s.io", resource: "roles", namespace: appNS, name: "swh-agent-secrets"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "roles", namespace: appNS},
		{verb: "update", group: "rbac.authorization.k8s.io", resource: "roles", namespace: appNS, name: "swh-agent-secrets"},
		{verb: "delete", group: "rbac.authorization.k8s.io", resource: "roles", namespace: appNS, name: "swh-agent-secrets"},
		{verb: "list", group: "rbac.authorization.k8s.io", resource: "rolebindings"},
		{verb: "watch", group: "rbac.authorization.k8s.io", resource: "rolebindings"},
		{verb: "get", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: appNS, name: "swh-agent-secrets"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: appNS},
		{verb: "update", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: appNS, name: "swh-agent-secrets"},
		{verb: "delete", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: appNS, name: "swh-agent-secrets"},
		{verb: "get", resource: "secrets", namespace: appNS, name: "db-credentials"},
		// Leader election, in its own namespace only: the Lease and the
		// core/v1 events client-go's leader election records.
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: namespace, name: "swh-controller"},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: namespace},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: namespace, name: "swh-controller"},
		{verb: "create", resource: "events", namespace: namespace},
		{verb: "patch", resource: "events", namespace: namespace},
		// The exclusive ports' Leases, in every namespace (an admission
		// policy confines the writes to those: TestLeasePolicies).
		{verb: "list", group: "coordination.k8s.io", resource: "leases"},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases"},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: appNS},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: appNS, name: "swh.db.write"},
		{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: appNS, name: "swh.db.write"},
		// The eviction guard's certificate (webhookcert): its Secret in its
		// own namespace, and the caBundle of its webhook configuration.
		{verb: "get", resource: "secrets", namespace: namespace, name: "swh-webhook"},
		{verb: "create", resource: "secrets", namespace: namespace},
		{verb: "update", resource: "secrets", namespace: namespace, name: "swh-webhook"},
		{verb: "get", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "swh-eviction-guard"},
		{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "swh-eviction-guard"},
	},
	agentSA: {
		{verb: "list", group: swhGroup, resource: swhRes},
		{verb: "watch", group: swhGroup, resource: swhRes},
		{verb: "get", group: swhGroup, resource: swhRes, namespace: appNS},
		// Child Services (cache).
		{verb: "list", resource: "services"},
		{verb: "watch", resource: "services"},
		{verb: "get", resource: "services", namespace: appNS},
		// The pods of its node (cache with a field selector).
		{verb: "list", resource: "pods"},
		{verb: "watch", resource: "pods"},
		{verb: "get", resource: "pods", namespace: appNS},
		// The readiness gate condition (confined by an admission policy).
		{verb: "patch", resource: "pods", subresource: "status", namespace: appNS},
		// Its Node (cache with a field selector).
		{verb: "list", resource: "nodes"},
		{verb: "watch", resource: "nodes"},
		{verb: "get", resource: "nodes", name: "node-a"},
		// Its slices: cached, written.
		{verb: "list", group: "discovery.k8s.io", resource: "endpointslices"},
		{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"},
		{verb: "get", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		{verb: "create", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		{verb: "update", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		{verb: "delete", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		// Events about the resources.
		{verb: "create", group: "events.k8s.io", resource: "events", namespace: appNS},
		{verb: "patch", group: "events.k8s.io", resource: "events", namespace: appNS},
		// The exclusive ports' Leases: cached, held (an admission policy
		// confines the updates to those: TestLeasePolicies).
		{verb: "list", group: "coordination.k8s.io", resource: "leases"},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: appNS, name: "swh.db.write"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: appNS, name: "swh.db.write"},
	},
}

// mustNot lists requests each ServiceAccount must be refused: what an
// attacker holding its token would want, and what belongs to the other
// binary or to the users.
var mustNot = map[string][]access{
	controllerSA: {
		// Secrets: get by name only (see needs), never listed, watched or written.
		{verb: "list", resource: "secrets", namespace: appNS},
		{verb: "list", resource: "secrets"},
		{verb: "watch", resource: "secrets"},
		{verb: "update", resource: "secrets", namespace: appNS, name: "db-credentials"},
		{verb: "create", resource: "secrets", namespace: appNS},
		// Only its own webhook configuration's caBundle.
		{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "other-webhook"},
		{verb: "update", group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "swh-eviction-guard"},
		// It rewrites only the ConfigMap and the Role and RoleBinding it
		// manages, none of the cluster's others.
		{verb: "update", resource: "configmaps", namespace: "kube-system", name: "coredns"},
		{verb: "delete", resource: "configmaps", namespace: appNS, name: "app-config"},
		{verb: "get", resource: "configmaps", namespace: appNS, name: "app-config"},
		{verb: "update", group: "rbac.authorization.k8s.io", resource: "roles", namespace: appNS, name: "admin"},
		{verb: "delete", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: appNS, name: "admins"},
		// It grants only what it holds: neither escalate nor bind.
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "roles", namespace: appNS},
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "roles", namespace: appNS},
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "admin"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
		{verb: "list", group: "apps", resource: "deployments"},
		// Scales are read, never written; the workloads themselves not
		// read (their pod templates are their owners').
		{verb: "update", group: "apps", resource: "deployments", subresource: "scale", namespace: appNS},
		{verb: "patch", group: "postgresql.cnpg.io", resource: "clusters", subresource: "scale", namespace: appNS},
		{verb: "get", group: "apps", resource: "deployments", namespace: appNS},
		{verb: "get", group: "apps", resource: "statefulsets", namespace: appNS},
		{verb: "watch", resource: "pods"},
		{verb: "update", resource: "pods", namespace: appNS},
		{verb: "delete", resource: "pods", namespace: appNS},
		{verb: "create", resource: "pods", subresource: "exec", namespace: appNS},
		{verb: "update", resource: "nodes", name: "node-a"},
		{verb: "patch", resource: "nodes", name: "node-a"},
		{verb: "delete", resource: "nodes", name: "node-a"},
		{verb: "update", resource: "services", namespace: appNS},
		{verb: "deletecollection", resource: "services", namespace: appNS},
		{verb: "patch", group: swhGroup, resource: swhRes, subresource: "status", namespace: appNS},
		{verb: "create", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		{verb: "create", resource: "endpoints", namespace: appNS},
		{verb: "update", resource: "endpoints", namespace: appNS},
		{verb: "create", group: swhGroup, resource: swhRes, namespace: appNS},
		{verb: "update", group: swhGroup, resource: swhRes, namespace: appNS},
		{verb: "delete", group: swhGroup, resource: swhRes, namespace: appNS},
		{verb: "patch", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-controller-manager"},
		{verb: "deletecollection", group: "coordination.k8s.io", resource: "leases", namespace: appNS},
		{verb: "create", resource: "events", namespace: appNS},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: namespace, name: controllerSA},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "swh-controller"},
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "cluster-admin"},
		{verb: "impersonate", resource: "users", name: "admin"},
		{verb: "update", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", name: "servicewithhealthchecks.network.swh.dev"},
		// The admission policies that confine the agents.
		{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies", name: "swh-agent-endpointslices"},
		{verb: "delete", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings", name: "swh-agent-endpointslice-services"},
	},
	agentSA: {
		// Secrets only through the Roles the controller makes for the
		// Secrets its probes reference (none installed here).
		{verb: "get", resource: "secrets", namespace: appNS, name: "db-credentials"},
		{verb: "get", resource: "secrets", namespace: "kube-system", name: "bootstrap-token-abcdef"},
		{verb: "get", resource: "secrets", namespace: namespace},
		{verb: "list", resource: "secrets", namespace: appNS},
		{verb: "list", resource: "secrets"},
		{verb: "watch", resource: "secrets"},
		{verb: "watch", resource: "secrets", namespace: appNS},
		{verb: "create", resource: "secrets", namespace: appNS},
		{verb: "update", resource: "secrets", namespace: appNS, name: "db-credentials"},
		{verb: "get", resource: "configmaps", namespace: appNS},
		// Registering a Service in swh-services would open it to the agents.
		{verb: "create", resource: "configmaps", namespace: appNS},
		{verb: "update", resource: "configmaps", namespace: appNS, name: "swh-services"},
		{verb: "patch", resource: "configmaps", namespace: appNS, name: "swh-services"},
		{verb: "create", resource: "services", namespace: appNS},
		{verb: "update", resource: "services", namespace: appNS},
		{verb: "patch", resource: "services", namespace: appNS},
		{verb: "delete", resource: "services", namespace: appNS},
		{verb: "update", group: swhGroup, resource: swhRes, namespace: appNS},
		{verb: "patch", group: swhGroup, resource: swhRes, namespace: appNS},
		{verb: "delete", group: swhGroup, resource: swhRes, namespace: appNS},
		{verb: "update", group: swhGroup, resource: swhRes, subresource: "status", namespace: appNS},
		{verb: "patch", group: swhGroup, resource: swhRes, subresource: "status", namespace: appNS},
		{verb: "update", resource: "pods", namespace: appNS},
		{verb: "delete", resource: "pods", namespace: appNS},
		{verb: "update", resource: "pods", subresource: "status", namespace: appNS},
		{verb: "create", resource: "pods", subresource: "exec", namespace: appNS},
		{verb: "create", resource: "pods", subresource: "eviction", namespace: appNS},
		{verb: "update", resource: "nodes", name: "node-a"},
		{verb: "patch", resource: "nodes", subresource: "status", name: "node-a"},
		{verb: "create", resource: "endpoints", namespace: appNS},
		{verb: "deletecollection", group: "discovery.k8s.io", resource: "endpointslices", namespace: appNS},
		// Leases are updated, never created, deleted or patched.
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: appNS},
		{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: appNS, name: "swh.db.write"},
		{verb: "patch", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-controller-manager"},
		{verb: "create", resource: "events", namespace: appNS},
		{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: namespace, name: agentSA},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", namespace: namespace},
		{verb: "impersonate", resource: "serviceaccounts", namespace: namespace, name: controllerSA},
		// The admission policies that confine it to its node.
		{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies", name: "swh-agent-endpointslices"},
		{verb: "delete", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings", name: "swh-agent-endpointslices"},
		{verb: "delete", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings", name: "swh-agent-endpointslice-services"},
		{verb: "create", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings"},
		{verb: "create", group: "admissionregistration.k8s.io", resource: "mutatingadmissionpolicies"},
		{verb: "create", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations"},
	},
}

// TestServiceAccountAccess installs the manifests' RBAC and asks the API
// server, through SubjectAccessReviews, whether each ServiceAccount may make
// each request of the tables above.
func TestServiceAccountAccess(t *testing.T) {
	installRBAC(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sa := range []string{controllerSA, agentSA} {
		user, groups := serviceAccountUser(sa)
		check := func(t *testing.T, a access, want bool) {
			t.Helper()
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
					Namespace: a.namespace, Name: a.name,
				},
			}}
			if err := controlPlane.Client.Create(ctx, review); err != nil {
				t.Fatalf("asking whether %s may %s: %v", sa, a, err)
			}
			if review.Status.Allowed != want {
				verdict := "refused"
				if review.Status.Allowed {
					verdict = "allowed"
				}
				t.Errorf("%s is %s to %s (%s)", sa, verdict, a, review.Status.Reason)
			}
		}
		t.Run(sa+"/allowed", func(t *testing.T) {
			for _, a := range needs[sa] {
				check(t, a, true)
			}
		})
		t.Run(sa+"/refused", func(t *testing.T) {
			for _, a := range mustNot[sa] {
				check(t, a, false)
			}
		})
	}
}

// TestRolesGrantOnlyWhatIsNeeded fails when a rule of a ServiceAccount's
// roles grants a verb on a resource that no entry of its needs table uses:
// a new RBAC marker must come with the request that justifies it.
func TestRolesGrantOnlyWhatIsNeeded(t *testing.T) {
	objs := manifests(t)
	for _, sa := range []string{controllerSA, agentSA} {
		used := map[string]bool{}
		// names holds, per verb and resource, the names of the needs that
		// name one: a rule confined to names may grant only those.
		names := map[string]map[string]bool{}
		for _, a := range needs[sa] {
			res := a.resource
			if a.subresource != "" {
				res += "/" + a.subresource
			}
			key := a.verb + " " + res + "." + a.group
			used[key] = true
			if a.name != "" {
				if names[key] == nil {
					names[key] = map[string]bool{}
				}
				names[key][a.name] = true
			}
		}
		granted := 0
		for _, binding := range harness.OfKind(objs, "ClusterRoleBinding", "RoleBinding") {
			rb := &rbacv1.RoleBinding{} // a ClusterRoleBinding decodes the same
			fromUnstructured(t, binding.Object, rb)
			if !bindsServiceAccount(rb, sa) {
				continue
			}
			role := find(t, objs, rb.RoleRef.Kind, rb.RoleRef.Name)
			rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
			for _, raw := range rules {
				rule := rbacv1.PolicyRule{}
				fromUnstructured(t, raw.(map[string]any), &rule)
				if len(rule.NonResourceURLs) > 0 {
					t.Errorf("%s %s: unexpected rule %v", rb.RoleRef.Kind, rb.RoleRef.Name, rule)
				}
				for _, g := range rule.APIGroups {
					for _, r := range rule.Resources {
						for _, v := range rule.Verbs {
							granted++
							key := v + " " + r + "." + g
							if !used[key] {
								t.Errorf("%s grants %s %s.%s to %s, which its binary does not use (or the needs table lacks it)",
									rb.RoleRef.Name, v, r, g, sa)
							}
							for _, n := range rule.ResourceNames {
								if !names[key][n] {
									t.Errorf("%s grants %s %s.%s named %q to %s, a name the needs table does not use",
										rb.RoleRef.Name, v, r, g, n, sa)
								}
							}
						}
					}
				}
			}
		}
		if granted == 0 {
			t.Errorf("no role is bound to %s", sa)
		}
	}
}

func bindsServiceAccount(rb *rbacv1.RoleBinding, sa string) bool {
	for _, s := range rb.Subjects {
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == namespace {
			return true
		}
	}
	return false
}
