package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/agent/publisher"
	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/test/harness"
)

// agentUser is the user the agent's ServiceAccount authenticates as (the
// chart's, in swh-system): the controller's Secret grants name it.
const agentUser = "system:serviceaccount:swh-system:swh-agent"

// TestRecreatedNamespaceGetsNoPreviousCredentials: tenant 1's resource
// reads its Secret db through the agent's RBAC (the controller's grant).
// The namespace is deleted (kube-controller-manager's namespace controller
// removes the Secret and the grant) and created again by tenant 2, whose
// resource names a Secret db too. Tenant 2's probe must never log in with
// tenant 1's user and password: before its own Secret is granted it fails
// with reason secret (the API server's 403), after, it logs in as its own
// user. Tenant 1's probe, once its grant is gone, stops using what it read.
func TestRecreatedNamespaceGetsNoPreviousCredentials(t *testing.T) {
	startNamespaceController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := controlPlane.Client
	ns := "reborn-" + rand.String(5)
	if err := harness.EnsureNamespace(ctx, admin, ns); err != nil {
		t.Fatal(err)
	}
	ip := harness.PodIP(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	if err := pg.Exec(ctx, "CREATE ROLE tenant2 LOGIN PASSWORD 'tenant2-password'"); err != nil {
		t.Fatal(err)
	}
	o := pg.Options()
	grantSecret(ctx, t, ns, "db", map[string]string{"user": o.User, "password": o.Password})

	// The agent reads Secrets with its own identity, not the admin's.
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:swh-system", "system:authenticated"}}
	reader, err := client.New(cfg, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	factory := publisher.NewProbers(reader, ttl)
	target := probes.Target{Host: ip, Port: 5432}
	probe := func(pr probes.Prober) probes.Result {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return pr.Probe(pctx, target)
	}
	// Tenant 1's probe passes as tenant 1's user; tenant 2's passes only as
	// its own.
	spec1 := postgresProbe("SELECT current_user = '"+o.User+"'", "db")
	spec2 := postgresProbe("SELECT current_user = 'tenant2'", "db")
	tenant1 := factory.Build(ns, types.UID("uid-of-tenant-1s-resource"), &spec1)
	if r := probe(tenant1); r.Status != probes.Success {
		t.Fatalf("tenant 1's probe: %s: %s", r.Reason, r.Message)
	}

	deleteNamespace(ctx, t, ns)
	if err := harness.EnsureNamespace(ctx, admin, ns); err != nil {
		t.Fatal(err)
	}
	tenant2 := factory.Build(ns, types.UID("uid-of-tenant-2s-resource"), &spec2)
	r := probe(tenant2)
	t.Logf("tenant 2's first probe, before its Secret is granted: %s: %s", r.Reason, r.Message)
	if r.Status != probes.Failure || r.Reason != publisher.ReasonSecret || !strings.Contains(r.Message, "forbidden") {
		t.Errorf("tenant 2's first probe: %s %s: %s; want a failure %s saying the Secret is forbidden (tenant 1's credentials must not be used)",
			r.Status, r.Reason, r.Message, publisher.ReasonSecret)
	}
	// What tenant 1 read is gone with its grant, whoever asks.
	harness.Eventually(t, 30*time.Second, "tenant 1's probe stops using what it read", func() error {
		if r := probe(tenant1); r.Status != probes.Failure || r.Reason != publisher.ReasonSecret {
			return fmt.Errorf("tenant 1's probe: %s %s: %s", r.Status, r.Reason, r.Message)
		}
		return nil
	})

	grantSecret(ctx, t, ns, "db", map[string]string{"user": "tenant2", "password": "tenant2-password"})
	harness.Eventually(t, 30*time.Second, "tenant 2's probe logs in as tenant 2", func() error {
		if r := probe(tenant2); r.Status != probes.Success {
			return fmt.Errorf("tenant 2's probe: %s: %s", r.Reason, r.Message)
		}
		return nil
	})
}

// grantSecret creates Secret name in ns and, as the controller does for a
// resource that names it, the Role and RoleBinding swh-agent-secrets that
// let the agent read it.
func grantSecret(ctx context.Context, t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swh-agent-secrets"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{name}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swh-agent-secrets"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "swh-agent-secrets"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "swh-system", Name: "swh-agent"}}},
	} {
		if err := controlPlane.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteNamespace deletes ns and waits until the namespace controller has
// removed it and everything in it.
func deleteNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	if err := controlPlane.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, "namespace "+ns+" deleted", func() error {
		err := controlPlane.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace %s: %v", ns, err)
	})
}

// startNamespaceController runs kube-controller-manager with only the
// namespace controller, which empties and removes deleted namespaces, until
// the test ends.
func startNamespaceController(t *testing.T) {
	t.Helper()
	harness.StartTestControllerManager(t, controlPlane, "namespace")
}
