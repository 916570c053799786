package controller_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/access"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// agentSA is the agents' ServiceAccount the controller grants Secrets to;
// it need not exist for RBAC to bind it.
var agentSA = types.NamespacedName{Namespace: "swh-system", Name: "swh-agent"}

// registration is what the ConfigMap swh-services should hold: its keys
// (Service → Service UID) and the resources owning it.
type registration struct {
	data   map[string]string
	owners []string
}

// serviceUID waits for the Service and returns its UID, what the registry
// lists it with.
func serviceUID(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	var uid string
	harness.Eventually(t, 20*time.Second, "Service "+name, func() error {
		svc, err := getService(ctx, ns, name)
		uid = string(svc.UID)
		return err
	})
	return uid
}

// checkManaged returns why obj is not labelled and owned as the controller
// keeps it, or nil.
func checkManaged(obj client.Object, owners []string) error {
	if obj.GetLabels()[access.LabelManagedBy] != access.ManagedBy {
		return fmt.Errorf("labels %v", obj.GetLabels())
	}
	var got []string
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != "ServiceWithHealthchecks" || (ref.Controller != nil && *ref.Controller) || (ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion) {
			return fmt.Errorf("owner reference %+v: want a resource, neither controller nor blocking", ref)
		}
		got = append(got, ref.Name)
	}
	if !slices.Equal(got, owners) {
		return fmt.Errorf("owners %v, want %v", got, owners)
	}
	return nil
}

// waitRegistered waits until the ConfigMap holds exactly want, and returns it.
func waitRegistered(t *testing.T, ctx context.Context, ns string, want registration) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("ConfigMap %s/%s holding %v", ns, access.ServicesConfigMap, want.data), func() error {
		if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: access.ServicesConfigMap}, cm); err != nil {
			return err
		}
		if !maps.Equal(cm.Data, want.data) || len(cm.BinaryData) > 0 {
			return fmt.Errorf("data %v binaryData %v", cm.Data, cm.BinaryData)
		}
		if cm.Immutable != nil && *cm.Immutable {
			return fmt.Errorf("immutable")
		}
		return checkManaged(cm, want.owners)
	})
	return cm
}

// waitGone waits until obj does not exist.
func waitGone(t *testing.T, ctx context.Context, obj client.Object) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("%T %s deleted", obj, obj.GetName()), func() error {
		err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

func deleteResource(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	swh := &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := controlPlane.Client.Delete(ctx, swh); err != nil {
		t.Fatal(err)
	}
}

// TestServicesRegistered: a child Service is listed, with its own UID, once
// the controller owns it (created, or adopted) and with its new UID once
// re-created, each resource adds its key and owner reference, a deleted one
// takes them away, and the last one the ConfigMap (no garbage collector runs
// here: the controller does it).
func TestServicesRegistered(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	startController(t, app.Options{})

	if err := controlPlane.Client.Create(ctx, newResource(ns, "web")); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "web")
	web := serviceUID(t, ctx, ns, "web")
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"web": web}, owners: []string{"web"}})

	// A Service of that name the controller does not own (no adopt
	// annotation yet) is not registered, though its resource owns the
	// ConfigMap (so the controller did see it).
	plainService(t, ctx, ns, "legacy")
	if err := controlPlane.Client.Create(ctx, newResource(ns, "legacy")); err != nil {
		t.Fatal(err)
	}
	waitForbiddenOrConflict(t, ctx, ns, "legacy")
	legacy := serviceUID(t, ctx, ns, "legacy")
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"web": web}, owners: []string{"legacy", "web"}})

	// Adopted: registered.
	updateResource(t, ctx, ns, "legacy", func(swh *swhv1alpha1.ServiceWithHealthchecks) {
		swh.Annotations = map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	})
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"web": web, "legacy": legacy}, owners: []string{"legacy", "web"}})

	if err := controlPlane.Client.Create(ctx, newResource(ns, "api")); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "api")
	api := serviceUID(t, ctx, ns, "api")
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"web": web, "legacy": legacy, "api": api}, owners: []string{"api", "legacy", "web"}})

	// A child Service deleted and re-created under the same name (a new
	// UID): the registry follows, so a slice owned by the old one no longer
	// counts.
	old, err := getService(ctx, ns, "api")
	if err != nil {
		t.Fatal(err)
	}
	if err := controlPlane.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "Service api re-created", func() error {
		svc, err := getService(ctx, ns, "api")
		if err != nil {
			return err
		}
		if svc.UID == old.UID {
			return fmt.Errorf("still the old one")
		}
		api = string(svc.UID)
		return nil
	})
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"web": web, "legacy": legacy, "api": api}, owners: []string{"api", "legacy", "web"}})

	// Deleted (its Service stays: no garbage collector here): unregistered.
	deleteResource(t, ctx, ns, "web")
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"legacy": legacy, "api": api}, owners: []string{"api", "legacy"}})

	// The controller stops owning a Service (someone removed the owner
	// reference): unregistered.
	svc, err := getService(ctx, ns, "api")
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(svc.DeepCopy())
	svc.OwnerReferences = nil
	if err := controlPlane.Client.Patch(ctx, svc, patch); err != nil {
		t.Fatal(err)
	}
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"legacy": legacy}, owners: []string{"api", "legacy"}})

	deleteResource(t, ctx, ns, "api")
	deleteResource(t, ctx, ns, "legacy")
	waitGone(t, ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: access.ServicesConfigMap}})
}

// waitForbiddenOrConflict waits for the resource to report that its Service
// is someone else's.
func waitForbiddenOrConflict(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, name+" in conflict", func() error {
		c, err := condition(t, ctx, ns, name)()
		if err != nil {
			return err
		}
		if c.Reason != swhv1alpha1.ReasonServiceNotOwned {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

// TestServicesConfigMapRepaired: whatever a tenant does to the ConfigMap is
// undone, so the admission policy never lets the agents write slices of a
// Service the controller did not register.
func TestServicesConfigMapRepaired(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	startController(t, app.Options{})
	if err := controlPlane.Client.Create(ctx, newResource(ns, "web")); err != nil {
		t.Fatal(err)
	}
	want := registration{data: map[string]string{"web": serviceUID(t, ctx, ns, "web")}, owners: []string{"web"}}
	waitRegistered(t, ctx, ns, want)

	for _, tc := range []struct {
		name string
		// edit changes the ConfigMap; nil deletes it.
		edit func(*corev1.ConfigMap)
	}{
		{name: "deleted"},
		{name: "kube-dns registered", edit: func(cm *corev1.ConfigMap) { cm.Data["kube-dns"] = "x" }},
		{name: "its key removed", edit: func(cm *corev1.ConfigMap) { delete(cm.Data, "web") }},
		{name: "a binary key", edit: func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"kube-dns": []byte("x")} }},
		{name: "owners removed", edit: func(cm *corev1.ConfigMap) { cm.OwnerReferences = nil }},
		// Out of the controller's cache, which selects the label.
		{name: "label removed and a key added", edit: func(cm *corev1.ConfigMap) {
			delete(cm.Labels, access.LabelManagedBy)
			cm.Data["kube-dns"] = "x"
		}},
		// An update cannot undo this: replaced.
		{name: "made immutable with a key added", edit: func(cm *corev1.ConfigMap) {
			cm.Immutable = new(true)
			cm.Data["kube-dns"] = "x"
		}},
		// A finalizer would keep the old one after its deletion.
		{name: "made immutable with a finalizer", edit: func(cm *corev1.ConfigMap) {
			cm.Immutable = new(true)
			cm.Finalizers = []string{"tenant.example/keep"}
			cm.Data["kube-dns"] = "x"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := client.ObjectKey{Namespace: ns, Name: access.ServicesConfigMap}
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cm := &corev1.ConfigMap{}
				if err := controlPlane.Client.Get(ctx, key, cm); err != nil {
					return err
				}
				if tc.edit == nil {
					return controlPlane.Client.Delete(ctx, cm)
				}
				tc.edit(cm)
				return controlPlane.Client.Update(ctx, cm)
			})
			if err != nil {
				t.Fatal(err)
			}
			waitRegistered(t, ctx, ns, want)
		})
	}
}

// withFinalizer adds a tenant's finalizer to obj, and takes it off when the
// test ends (should the controller have left it).
func withFinalizer(t *testing.T, ctx context.Context, obj client.Object) {
	t.Helper()
	const finalizer = "tenant.example/keep"
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		obj.SetFinalizers(append(obj.GetFinalizers(), finalizer))
		return controlPlane.Client.Update(ctx, obj)
	})
	if err != nil {
		t.Fatalf("adding a finalizer to %T %s: %v", obj, obj.GetName(), err)
	}
	left := obj.DeepCopyObject().(client.Object)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(left), left); err != nil {
				return client.IgnoreNotFound(err)
			}
			left.SetFinalizers(nil)
			return controlPlane.Client.Update(ctx, left)
		})
	})
}

// TestTenantRegistryRemoved: a labelled swh-services a tenant creates in a
// namespace without resources, with a finalizer, is deleted outright: a
// Terminating ConfigMap would still be the admission policy's params.
func TestTenantRegistryRemoved(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	startController(t, app.Options{})
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: access.ServicesConfigMap,
			Labels: map[string]string{access.LabelManagedBy: access.ManagedBy}},
		Data: map[string]string{"kube-dns": "x"},
	}
	if err := controlPlane.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	withFinalizer(t, ctx, cm)
	waitGone(t, ctx, cm)
}

// TestSecretGrantsFinalizerCleared: a Role and RoleBinding given a finalizer
// go when the last Secret reference does, instead of staying Terminating
// (RBAC honours a Terminating binding). The controller is stopped while the
// finalizers are added, since it would otherwise clear them at once.
func TestSecretGrantsFinalizerCleared(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c := startController(t, app.Options{AgentServiceAccount: agentSA})
	if err := controlPlane.Client.Create(ctx, postgresResource(ns, "db", "db-a")); err != nil {
		t.Fatal(err)
	}
	waitGranted(t, ctx, ns, []string{"db-a"}, []string{"db"})
	c.Stop()

	grant := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: access.SecretsGrant}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: access.SecretsGrant}}
	withFinalizer(t, ctx, grant)
	withFinalizer(t, ctx, binding)
	updateResource(t, ctx, ns, "db", func(swh *swhv1alpha1.ServiceWithHealthchecks) {
		swh.Spec.Healthcheck.Probes = swh.Spec.Healthcheck.Probes[:1]
	})

	startController(t, app.Options{AgentServiceAccount: agentSA})
	waitGone(t, ctx, binding)
	waitGone(t, ctx, grant)
	if agentMayGet(t, ctx, ns, "db-a") {
		t.Error("agents may still get db-a")
	}
}

// TestOnlyManagedObjectsCached: the controller's cache holds the ConfigMaps
// and Roles it manages, not the cluster's others.
func TestOnlyManagedObjectsCached(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	meta := metav1.ObjectMeta{Namespace: ns, Name: "tenant"}
	foreign := []client.Object{
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "v"}},
		&rbacv1.Role{ObjectMeta: meta},
	}
	for _, obj := range foreign {
		if err := controlPlane.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	c := startController(t, app.Options{AgentServiceAccount: agentSA})
	if err := controlPlane.Client.Create(ctx, postgresResource(ns, "db", "db-a")); err != nil {
		t.Fatal(err)
	}
	waitGranted(t, ctx, ns, []string{"db-a"}, []string{"db"})
	// Both kinds' own objects are cached (created after the foreign ones):
	// the foreign ones would be too, but for the label selector.
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &rbacv1.RoleList{}} {
		harness.Eventually(t, 20*time.Second, fmt.Sprintf("%T cached", list), func() error {
			if err := c.cache.List(ctx, list, client.InNamespace(ns)); err != nil {
				return err
			}
			var names []string
			for _, obj := range mustItems(t, list) {
				names = append(names, obj.GetName())
			}
			if len(names) != 1 || (names[0] != access.ServicesConfigMap && names[0] != access.SecretsGrant) {
				return fmt.Errorf("cached %v", names)
			}
			return nil
		})
	}
}

func mustItems(t *testing.T, list client.ObjectList) []client.Object {
	t.Helper()
	var out []client.Object
	switch l := list.(type) {
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *rbacv1.RoleList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		t.Fatalf("%T", list)
	}
	return out
}

// postgresResource returns a resource whose probes log in with the Secrets.
func postgresResource(ns, name string, secrets ...string) *swhv1alpha1.ServiceWithHealthchecks {
	swh := newResource(ns, name)
	for _, s := range secrets {
		swh.Spec.Healthcheck.Probes = append(swh.Spec.Healthcheck.Probes, swhv1alpha1.Probe{
			Mode: swhv1alpha1.ProbeModePostgreSQL, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
			PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromInt32(5432), AuthSecretName: s},
		})
	}
	return swh
}

// waitGranted waits until the Role and RoleBinding swh-agent-secrets grant
// the agents get on exactly secrets, owned by the resources owners.
func waitGranted(t *testing.T, ctx context.Context, ns string, secrets, owners []string) {
	t.Helper()
	key := client.ObjectKey{Namespace: ns, Name: access.SecretsGrant}
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("agents granted get on %v", secrets), func() error {
		role := &rbacv1.Role{}
		if err := controlPlane.Client.Get(ctx, key, role); err != nil {
			return err
		}
		want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: secrets}}
		if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
			return fmt.Errorf("rules %v", role.Rules)
		}
		if err := checkManaged(role, owners); err != nil {
			return fmt.Errorf("Role: %w", err)
		}
		binding := &rbacv1.RoleBinding{}
		if err := controlPlane.Client.Get(ctx, key, binding); err != nil {
			return err
		}
		if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: access.SecretsGrant}) {
			return fmt.Errorf("roleRef %+v", binding.RoleRef)
		}
		wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentSA.Namespace, Name: agentSA.Name}}
		if fmt.Sprint(binding.Subjects) != fmt.Sprint(wantSubjects) {
			return fmt.Errorf("subjects %v", binding.Subjects)
		}
		return checkManaged(binding, owners)
	})
}

// agentMayGet asks the API server whether the agents may get a Secret of ns.
func agentMayGet(t *testing.T, ctx context.Context, ns, secret string) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   fmt.Sprintf("system:serviceaccount:%s:%s", agentSA.Namespace, agentSA.Name),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + agentSA.Namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "get", Resource: "secrets", Namespace: ns, Name: secret,
		},
	}}
	if err := controlPlane.Client.Create(ctx, review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// TestSecretGrants: the agents may get exactly the Secrets the namespace's
// PostgreSQL probes name, and nothing once no probe names one.
func TestSecretGrants(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	startController(t, app.Options{AgentServiceAccount: agentSA})
	grant := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: access.SecretsGrant}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: access.SecretsGrant}}

	// A resource without PostgreSQL probes grants nothing (the ConfigMap
	// appearing says the namespace was reconciled).
	if err := controlPlane.Client.Create(ctx, newResource(ns, "web")); err != nil {
		t.Fatal(err)
	}
	waitRegistered(t, ctx, ns, registration{data: map[string]string{"web": serviceUID(t, ctx, ns, "web")}, owners: []string{"web"}})
	for _, obj := range []client.Object{grant, binding} {
		if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Fatalf("%T: %v, want none", obj, err)
		}
	}

	if err := controlPlane.Client.Create(ctx, postgresResource(ns, "db", "db-a")); err != nil {
		t.Fatal(err)
	}
	waitGranted(t, ctx, ns, []string{"db-a"}, []string{"db"})
	for secret, want := range map[string]bool{"db-a": true, "db-b": false} {
		if got := agentMayGet(t, ctx, ns, secret); got != want {
			t.Errorf("agents may get %s: %v, want %v", secret, got, want)
		}
	}

	if err := controlPlane.Client.Create(ctx, postgresResource(ns, "replica", "db-b", "db-a")); err != nil {
		t.Fatal(err)
	}
	waitGranted(t, ctx, ns, []string{"db-a", "db-b"}, []string{"db", "replica"})

	// Tenants' edits are undone.
	for name, edit := range map[string]func() error{
		"Role widened": func() error {
			r := &rbacv1.Role{}
			if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(grant), r); err != nil {
				return err
			}
			r.Rules[0].ResourceNames = nil // every Secret of the namespace
			return controlPlane.Client.Update(ctx, r)
		},
		"RoleBinding deleted": func() error { return controlPlane.Client.Delete(ctx, binding.DeepCopy()) },
	} {
		if err := retry.RetryOnConflict(retry.DefaultRetry, edit); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		waitGranted(t, ctx, ns, []string{"db-a", "db-b"}, []string{"db", "replica"})
	}

	// The references go one by one: a spec edit, then a deletion.
	updateResource(t, ctx, ns, "replica", func(swh *swhv1alpha1.ServiceWithHealthchecks) {
		swh.Spec.Healthcheck.Probes = swh.Spec.Healthcheck.Probes[:1]
	})
	waitGranted(t, ctx, ns, []string{"db-a"}, []string{"db"})
	deleteResource(t, ctx, ns, "db")
	waitGone(t, ctx, binding)
	waitGone(t, ctx, grant)
	if agentMayGet(t, ctx, ns, "db-a") {
		t.Error("agents may still get db-a")
	}
}

// TestSecretGrantsNeedGetSecrets runs the controller as a ServiceAccount
// bound to the chart's generated ClusterRole: it may create the Role
// granting a Secret (RBAC's escalation check passes because it holds get on
// secrets, without escalate or bind), and without get on secrets the API
// server refuses the same Role.
func TestSecretGrantsNeedGetSecrets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		drop    string // a resource removed from the generated rules
		granted bool
	}{
		{name: "generated RBAC", granted: true},
		{name: "without get on secrets", drop: "secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			var rules []rbacv1.PolicyRule
			for _, r := range generatedRules(t) {
				r.Resources = slices.DeleteFunc(r.Resources, func(res string) bool { return res == tc.drop })
				if len(r.Resources) > 0 {
					rules = append(rules, r)
				}
			}
			cfg := serviceAccountConfig(t, ns, rules)
			c := startControllerAs(t, cfg, app.Options{AgentServiceAccount: agentSA})
			if err := controlPlane.Client.Create(ctx, postgresResource(ns, "db", "db-a")); err != nil {
				t.Fatal(err)
			}
			if tc.granted {
				waitGranted(t, ctx, ns, []string{"db-a"}, []string{"db"})
				if n := c.counter(t, "swh_controller_access_writes_total", map[string]string{"result": "forbidden"}); n != 0 {
					t.Errorf("%v writes forbidden", n)
				}
				return
			}
			harness.Eventually(t, 20*time.Second, "the Role refused", func() error {
				if n := c.counter(t, "swh_controller_access_writes_total", map[string]string{"kind": "Role", "result": "forbidden"}); n == 0 {
					return fmt.Errorf("no refusal counted")
				}
				return nil
			})
			if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: access.SecretsGrant}, &rbacv1.Role{}); !apierrors.IsNotFound(err) {
				t.Errorf("Role: %v, want none", err)
			}
			// The refusal is the escalation check's, not a missing verb on
			// roles: the same Role, created with the same credentials.
			as, err := client.New(cfg, client.Options{Scheme: controlPlane.Client.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"db-a"},
			}}}
			err = as.Create(ctx, role)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "attempting to grant RBAC permissions not currently held") {
				t.Errorf("creating the Role without get on secrets: %v, want the escalation check's refusal", err)
			}
		})
	}
}

// serviceAccountConfig binds a ServiceAccount of ns to a ClusterRole with
// rules and returns a configuration acting as it.
func serviceAccountConfig(t *testing.T, ns string, rules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := context.Background()
	name := "swh-controller-" + ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "swh-controller"}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := controlPlane.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), binding)
		_ = controlPlane.Client.Delete(context.Background(), role)
	})
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":swh-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return cfg
}
