package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// generatedRules returns the rules of the controller's generated ClusterRole.
func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "charts", "swh", "files", "rbac", "controller", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		role := &rbacv1.ClusterRole{}
		if err := yaml.Unmarshal([]byte(doc), role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "ClusterRole" {
			return role.Rules
		}
	}
	t.Fatal("no ClusterRole in the generated RBAC")
	return nil
}

// TestForbiddenWriteIsReported runs the controller as a user holding the
// generated ClusterRole minus update on servicewithhealthchecks/finalizers.
// With OwnerReferencesPermissionEnforcement (on in this suite), creating the
// child Service, whose owner reference blocks the owner's deletion, is then
// forbidden: the controller must say so in the status and an event, and
// recover once the permission is granted.
// restrictedController runs a controller as a user bound to the generated
// ClusterRole minus what drop removes from its rules, and returns a function
// that grants the full role.
func restrictedController(t *testing.T, ns string, drop func(rbacv1.PolicyRule) rbacv1.PolicyRule) (grant func()) {
	t.Helper()
	ctx := context.Background()
	user := "restricted-" + ns
	full := generatedRules(t)
	var rules []rbacv1.PolicyRule
	for _, r := range full {
		r = drop(*r.DeepCopy())
		if len(r.Resources) > 0 && len(r.Verbs) > 0 {
			rules = append(rules, r)
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if err := controlPlane.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := controlPlane.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), binding)
		_ = controlPlane.Client.Delete(context.Background(), role)
	})
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	startControllerAs(t, cfg, app.Options{})
	return func() {
		t.Helper()
		got := &rbacv1.ClusterRole{}
		if err := controlPlane.Client.Get(ctx, client.ObjectKey{Name: user}, got); err != nil {
			t.Fatal(err)
		}
		got.Rules = full
		if err := controlPlane.Client.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
}

// waitForbidden waits for ServiceSynced=False/Forbidden naming want, and its event.
func waitForbidden(t *testing.T, ctx context.Context, ns, name, want string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, "the refusal reported", func() error {
		c, err := condition(t, ctx, ns, name)()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != swhv1alpha1.ReasonForbidden || !strings.Contains(c.Message, want) {
			return fmt.Errorf("condition %+v", c)
		}
		return hasEvent(ctx, ns, name, swhv1alpha1.ReasonForbidden)
	})
}

func TestForbiddenWriteIsReported(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	grant := restrictedController(t, ns, func(r rbacv1.PolicyRule) rbacv1.PolicyRule {
		r.Resources = slices.DeleteFunc(r.Resources, func(res string) bool { return res == "servicewithhealthchecks/finalizers" })
		return r
	})
	if err := controlPlane.Client.Create(ctx, newResource(ns, "locked")); err != nil {
		t.Fatal(err)
	}
	waitForbidden(t, ctx, ns, "locked", "finalizers")
	if _, err := getService(ctx, ns, "locked"); !apierrors.IsNotFound(err) {
		t.Fatalf("child Service: %v, want none", err)
	}

	// Granted, and the resource touched (the retry after a refusal waits a
	// minute): the Service is created, with its blocking owner reference.
	grant()
	updateResource(t, ctx, ns, "locked", func(swh *swhv1alpha1.ServiceWithHealthchecks) {
		swh.Annotations = map[string]string{"touched": "yes"}
	})
	waitSynced(t, ctx, ns, "locked")
	svc, err := getService(ctx, ns, "locked")
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(svc); ref == nil || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("owner reference %+v, want the resource, blocking its deletion", ref)
	}
}

// TestForbiddenAdoptionResumes: an adoption whose last step, deleting the
// built-in controller's slices, is forbidden reports it, and finishes once
// the permission is granted (the status said Forbidden in between, not
// Adopting: the controller must still remember the slices).
func TestForbiddenAdoptionResumes(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	grant := restrictedController(t, ns, func(r rbacv1.PolicyRule) rbacv1.PolicyRule {
		if slices.Contains(r.Resources, "endpointslices") {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == "delete" })
		}
		return r
	})
	node := "forbidden-" + ns
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	_, builtin := plainService(t, ctx, ns, "legacy")
	if err := controlPlane.Client.Create(ctx, agentSlice(ns, "legacy", "http", node, discoveryv1.AddressTypeIPv4,
		endpoint("legacy-0", "uid-legacy-0", "10.244.9.9", node, true))); err != nil {
		t.Fatal(err)
	}
	swh := newResource(ns, "legacy")
	swh.Spec.Type = corev1.ServiceTypeNodePort
	swh.Annotations = map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	waitForbidden(t, ctx, ns, "legacy", "endpointslices")
	if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(builtin), &discoveryv1.EndpointSlice{}); err != nil {
		t.Fatalf("the built-in slice: %v", err)
	}

	grant()
	updateResource(t, ctx, ns, "legacy", func(swh *swhv1alpha1.ServiceWithHealthchecks) {
		swh.Annotations["touched"] = "yes"
	})
	harness.Eventually(t, 20*time.Second, "adoption finished", func() error {
		if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(builtin), &discoveryv1.EndpointSlice{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the built-in slice is still there (%v)", err)
		}
		return nil
	})
	waitSynced(t, ctx, ns, "legacy")
}
