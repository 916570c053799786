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

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/controller/reconciler"
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
func TestForbiddenWriteIsReported(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	user := "restricted-" + ns
	full := generatedRules(t)
	var rules []rbacv1.PolicyRule
	for _, r := range full {
		r.Resources = slices.DeleteFunc(slices.Clone(r.Resources), func(res string) bool { return res == "servicewithhealthchecks/finalizers" })
		if len(r.Resources) > 0 {
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

	if err := controlPlane.Client.Create(ctx, newResource(ns, "locked")); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "the refusal reported", func() error {
		c, err := condition(t, ctx, ns, "locked")()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != reconciler.ReasonForbidden || !strings.Contains(c.Message, "finalizers") {
			return fmt.Errorf("condition %+v", c)
		}
		return hasEvent(ctx, ns, "locked", reconciler.ReasonForbidden)
	})
	if _, err := getService(ctx, ns, "locked"); !apierrors.IsNotFound(err) {
		t.Fatalf("child Service: %v, want none", err)
	}

	// Granted, and the resource touched (the retry after a refusal waits a
	// minute): the Service is created, with its blocking owner reference.
	got := &rbacv1.ClusterRole{}
	if err := controlPlane.Client.Get(ctx, client.ObjectKey{Name: user}, got); err != nil {
		t.Fatal(err)
	}
	got.Rules = full
	if err := controlPlane.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
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
