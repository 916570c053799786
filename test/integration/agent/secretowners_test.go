package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/agent/publisher"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// agentUser is the user the agent's ServiceAccount authenticates as (the
// chart's, in swh-system): the controller's Secret grants name it.
const agentUser = "system:serviceaccount:swh-system:swh-agent"

// TestRecreatedNamespaceGetsNoPreviousCredentials: tenant 1's resource
// reads its Secret db through the agent's RBAC (the controller's grant);
// once its grant is gone, its probe stops using what it read. The
// namespace is deleted (kube-controller-manager's namespace controller
// removes the Secret and the grant) and created again by tenant 2, whose
// resource of the same name names a Secret db too. Tenant 2's pod must
// never pass with tenant 1's user and password: before its own Secret is
// granted it fails with reason secret (the API server's 403), after, it
// logs in as its own user.
func TestRecreatedNamespaceGetsNoPreviousCredentials(t *testing.T) {
	startNamespaceController(t)
	// The agent reads Secrets with its own identity, not the admin's.
	startAgentThrough(t, nodeA, 2*time.Second, asAgent)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := controlPlane.Client
	ns := "reborn-" + rand.String(5)
	if err := harness.EnsureNamespace(ctx, admin, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever step failed, no resource of this test is left for the
		// next tests' agents to probe.
		ctx := context.Background()
		_ = admin.DeleteAllOf(ctx, &swhv1alpha1.ServiceWithHealthchecks{}, client.InNamespace(ns))
		_ = admin.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))
		_ = admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	ip := harness.PodIP(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	if err := pg.Exec(ctx, "CREATE ROLE tenant2 LOGIN PASSWORD 'tenant2-password'"); err != nil {
		t.Fatal(err)
	}
	o := pg.Options()
	// Each tenant's probe passes only as its own user.
	tenant := func(user string) {
		t.Helper()
		dbPod(t, ns, "db-0", nodeA, ip)
		swh := resource(ns, "db", []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}},
			postgresProbe("SELECT current_user = '"+user+"'", "db"))
		swh.Spec.Selector = map[string]string{"app": "db"}
		if err := admin.Create(ctx, swh); err != nil {
			t.Fatal(err)
		}
	}
	passing := map[string]string{"db-node-a": "db-0:TTF"}

	grantSecret(ctx, t, ns, "db", map[string]string{"user": o.User, "password": o.Password})
	tenant(o.User)
	waitPublished(t, ns, "db", passing)
	// What tenant 1 read is gone with its grant.
	if err := admin.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swh-agent-secrets"}}); err != nil {
		t.Fatal(err)
	}
	forbidden(t, ns)
	// Granted again: the agent holds tenant 1's credentials as the
	// namespace goes.
	if err := admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swh-agent-secrets"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "swh-agent-secrets"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "swh-system", Name: "swh-agent"}}}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "db", passing)
	// Tenant 1 deletes its resource, then the namespace: its probes stop,
	// and nothing reads the Secret again until tenant 2's resource asks.
	if err := admin.Delete(ctx, &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}}); err != nil {
		t.Fatal(err)
	}

	deleteNamespace(ctx, t, ns)
	if err := harness.EnsureNamespace(ctx, admin, ns); err != nil {
		t.Fatal(err)
	}
	// Logged in as tenant 1, its pod would pass, or fail its query.
	never := watchObservations(ns, "db", func(got map[string]string, slices []discoveryv1.EndpointSlice) string {
		if fmt.Sprint(got) == fmt.Sprint(passing) {
			return fmt.Sprint(got)
		}
		for i := range slices {
			reasons, _ := swhv1alpha1.EndpointReasonsOf(slices[i].Annotations)
			if r, ok := reasons["db-0"]; ok && r.Reason != string(publisher.ReasonSecret) && r.Reason != swhv1alpha1.ReasonPending {
				return "db-0 failing for reason " + r.Reason
			}
		}
		return ""
	})
	tenant("tenant2")
	forbidden(t, ns)
	time.Sleep(3 * time.Second) // more than a reuse period: a cached read would be used by now
	never.check(t, "before tenant 2's Secret is granted")

	grantSecret(ctx, t, ns, "db", map[string]string{"user": "tenant2", "password": "tenant2-password"})
	waitPublished(t, ns, "db", passing)
}

// forbidden waits until the probe of pod db-0 of resource db fails with
// reason secret, and checks that the reason is the API server's 403.
func forbidden(t *testing.T, ns string) {
	t.Helper()
	// A pod that passed is kept published while its probe cannot run
	// (fail static); one that never passed is not ready.
	harness.Eventually(t, 20*time.Second, "db-0's probe failing for the Secret", func() error {
		reasons, _, err := sliceReasons(context.Background(), ns, "db")
		if err != nil {
			return err
		}
		r, ok := reasons["db-0"]
		switch {
		case !ok || (r.Reason != string(publisher.ReasonSecret) && r.Reason != swhv1alpha1.ReasonFailStatic):
			return fmt.Errorf("reasons %+v", reasons)
		case r.Reason == swhv1alpha1.ReasonFailStatic && !strings.Contains(r.Message, ": secret: "):
			return fmt.Errorf("kept for another reason: %+v", r)
		case !strings.Contains(r.Message, "forbidden"):
			t.Fatalf("db-0 fails with %s: %s; want the Secret forbidden", r.Reason, r.Message)
		}
		return nil
	})
}

// asAgent makes the Secret reads that pass through it as the agent's
// ServiceAccount, so that the grants the controller writes are what
// decides; the rest of the agent's traffic keeps the suite's identity.
func asAgent(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/secrets/") {
			return next.RoundTrip(req)
		}
		req = req.Clone(req.Context())
		req.Header.Set("Impersonate-User", agentUser)
		for _, g := range []string{"system:serviceaccounts", "system:serviceaccounts:swh-system", "system:authenticated"} {
			req.Header.Add("Impersonate-Group", g)
		}
		return next.RoundTrip(req)
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
	// No kubelet confirms the pods' deletion here: do it as one would.
	if err := controlPlane.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
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
