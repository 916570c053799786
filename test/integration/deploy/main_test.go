// Package deploy_test checks the deployment in deploy/ against a real
// kube-apiserver: the plain manifests rendered from the Helm chart are
// accepted (server-side dry-run, Pod Security "restricted" included), the
// ServiceAccounts can do what their binaries need and nothing more
// (SubjectAccessReviews against the installed RBAC), and the binaries run
// under their ServiceAccounts (impersonated) without a single 403. It also
// dry-runs the chart with its optional parts on (through bin/helm, when
// built), checks that every value is documented and that the Dockerfile
// copies every module the binaries build from. The optional PrometheusRule
// and Grafana dashboard must query only metrics the binaries export, and the
// alerts docs/operations.md shows must be the ones the chart renders.
package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/harness"
)

const (
	// namespace is where the plain manifests install swh.
	namespace = "swh-system"
	// controllerSA and agentSA are the binaries' ServiceAccounts there.
	controllerSA = "swh-controller"
	agentSA      = "swh-agent"
	// fieldOwner applies the manifests, as kubectl apply --server-side would.
	fieldOwner = "swh-deploy-test"
)

var controlPlane *harness.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(harness.RunSuite(m, harness.SuiteOptions{
		Name: "deploy",
		// On by default in OpenShift: owner references need RBAC of their own.
		ControlPlane: harness.ControlPlaneOptions{
			ExtraAPIServerFlags: map[string]string{"enable-admission-plugins": "OwnerReferencesPermissionEnforcement"},
		},
		Setup: func(_ context.Context, cp *harness.ControlPlane) (func(), error) {
			controlPlane = cp
			return nil, nil
		},
	}))
}

// manifests returns the objects of deploy/manifests/swh.yaml, in order.
func manifests(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := harness.ReadManifests(filepath.Join(root, "deploy", "manifests", "swh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the object of kind and name, or fails the test.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the manifests hold no %s %s", kind, name)
	return nil
}

// apply applies objs with server-side apply, for real or as a dry run.
func apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, dryRun bool) error {
	var errs []error
	for _, o := range objs {
		opts := []client.ApplyOption{client.FieldOwner(fieldOwner), client.ForceOwnership}
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// installRBAC installs the manifests' Namespace, ServiceAccounts and RBAC
// for real (idempotent: tests share the control plane).
func installRBAC(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	objs := manifests(t)
	rbac := harness.OfKind(objs, "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := apply(ctx, controlPlane.Client, rbac, false); err != nil {
		t.Fatalf("installing the RBAC: %v", err)
	}
	return objs
}

// serviceAccountUser is the user name and groups a ServiceAccount's token
// authenticates as.
func serviceAccountUser(sa string) (string, []string) {
	return fmt.Sprintf("system:serviceaccount:%s:%s", namespace, sa),
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// forbiddenLog records the requests the API server refused with 403.
type forbiddenLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *forbiddenLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// impersonating returns the administrator's configuration acting as the
// ServiceAccount sa, as the binary's in-cluster token would, and a log of
// the requests the API server forbade.
func impersonating(sa string) (*rest.Config, *forbiddenLog) {
	cfg := rest.CopyConfig(controlPlane.Config)
	user, groups := serviceAccountUser(sa)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg, recordForbidden(cfg)
}

// recordForbidden makes cfg log the requests the API server refuses with
// 403 (RBAC, or an admission policy whose reason is Forbidden).
func recordForbidden(cfg *rest.Config) *forbiddenLog {
	return recordStatus(cfg, http.StatusForbidden)
}

// recordRefused makes cfg log the requests refused with 403 or 422: an
// admission policy that cannot find its param refuses with 422 Invalid.
func recordRefused(cfg *rest.Config) *forbiddenLog {
	return recordStatus(cfg, http.StatusForbidden, http.StatusUnprocessableEntity)
}

func recordStatus(cfg *rest.Config, codes ...int) *forbiddenLog {
	log := &forbiddenLog{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && slices.Contains(codes, resp.StatusCode) {
				log.mu.Lock()
				log.seen = append(log.seen, resp.Status+": "+r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
				log.mu.Unlock()
			}
			return resp, err
		})
	})
	return log
}
