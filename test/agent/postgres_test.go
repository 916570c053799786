package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

func postgresProbe(query, secret string) swhv1alpha1.Probe {
	return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModePostgreSQL, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
		PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromString("postgres"), DBName: "postgres", Query: query,
			AuthSecretName: secret, TLSMode: swhv1alpha1.PostgreSQLTLSDisable}}
}

func dbPod(t *testing.T, ns, name, node, ip string) {
	t.Helper()
	if _, err := harness.CreatePod(context.Background(), controlPlane.Client, harness.PodOptions{
		Namespace: ns, Name: name, Node: node, Labels: map[string]string{"app": "db"}, IPs: []string{ip},
		Ports: []corev1.ContainerPort{{Name: "postgres", ContainerPort: 5432}},
	}); err != nil {
		t.Fatal(err)
	}
}

func credentials(t *testing.T, ns, name string, pg *harness.Postgres) {
	t.Helper()
	o := pg.Options()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		StringData: map[string]string{"user": o.User, "password": o.Password}}
	if err := controlPlane.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseReadWrite is the product statement's database example on a
// real primary and streaming replica: db-write follows the primary through
// a promotion, db-read spreads over every healthy member.
func TestDatabaseReadWrite(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ns := namespace(t)
	primary := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: "10.244.27.1"})
	replica := primary.StartTestReplica(t, "10.244.27.2", 5432)
	dbPod(t, ns, "db-0", nodeA, "10.244.27.1")
	dbPod(t, ns, "db-1", nodeB, "10.244.27.2")
	credentials(t, ns, "db-credentials", primary)
	port := []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}
	for name, query := range map[string]string{"db-read": "SELECT 1", "db-write": "SELECT NOT pg_is_in_recovery()"} {
		swh := resource(ns, name, port, postgresProbe(query, "db-credentials"))
		swh.Spec.Selector = map[string]string{"app": "db"}
		if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
			t.Fatal(err)
		}
	}
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:TTF"})
	waitPublished(t, ns, "db-write", map[string]string{"db-write-node-a": "db-0:TTF", "db-write-node-b": "db-1:FFF"})

	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "db-write", map[string]string{"db-write-node-a": "db-0:FFF", "db-write-node-b": "db-1:TTF"})
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:FFF", "db-read-node-b": "db-1:TTF"})
}

// TestMissingSecretFailsTheProbeUntilCreated: a Secret that does not exist
// fails the probe with a reason and an event, never a crash; creating it
// lets the probe pass without restarting anything.
func TestMissingSecretFailsTheProbeUntilCreated(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: "10.244.28.1"})
	dbPod(t, ns, "db-0", nodeA, "10.244.28.1")
	swh := resource(ns, "late", []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromInt32(5432)}}, postgresProbe("SELECT 1", "late-credentials"))
	swh.Spec.Selector = map[string]string{"app": "db"}
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "late", map[string]string{"late-node-a": "db-0:FFF"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		events := &eventsv1.EventList{}
		if err := controlPlane.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		found := ""
		for _, e := range events.Items {
			if e.Regarding.Name == "late" && e.Reason == "ProbeMisconfigured" {
				found = e.Note
			}
		}
		if found != "" {
			if want := "Secret " + ns + "/late-credentials not found"; !contains(found, want) {
				t.Errorf("event %q does not say %q", found, want)
			}
			if contains(found, pg.Options().Password) {
				t.Errorf("event leaks the password: %q", found)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no ProbeMisconfigured event naming the missing Secret")
		}
		time.Sleep(200 * time.Millisecond)
	}
	credentials(t, ns, "late-credentials", pg)
	waitPublished(t, ns, "late", map[string]string{"late-node-a": "db-0:TTF"})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
