package agent_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// mysqlProbe is a MySQL probe on the port named mysql, logging in with
// Secret secret.
func mysqlProbe(query, secret string) swhv1alpha1.Probe {
	return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeMySQL, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 2,
		MySQL: &swhv1alpha1.MySQLProbe{TargetPort: intstr.FromString("mysql"), Query: query, AuthSecretName: secret}}
}

// TestMySQLWriteFollowsThePrimary: a real MariaDB primary and replica on
// pod addresses; mysql-write (SELECT @@read_only = 0) publishes the
// primary only, mysql-read every member; a failover (the primary made
// read-only, the replica promoted) moves mysql-write. Credentials come
// from a Secret; a Secret with a wrong password fails with reason auth.
func TestMySQLWriteFollowsThePrimary(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	ctx := context.Background()

	ips := harness.PodIPs(t, 2)
	primary := harness.StartTestMariaDB(t, harness.MariaDBOptions{Addr: ips[0]})
	replica := primary.StartTestReplica(t, ips[1], 3306)
	for i, name := range []string{"sql-a", "sql-b"} {
		_, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{Namespace: ns, Name: name, Node: nodeA,
			Labels: map[string]string{"app": "sql"}, IPs: []string{ips[i]}, Ports: []corev1.ContainerPort{{Name: "mysql", ContainerPort: 3306}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	o := primary.Options()
	for name, password := range map[string]string{"sql-credentials": o.Password, "wrong-credentials": o.Password + "-not"} {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"user": o.User, "password": password}}
		if err := controlPlane.Client.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
	}
	ports := []swhv1alpha1.ServicePort{{Name: "mysql", Port: 3306, TargetPort: intstr.FromString("mysql")}}
	for _, r := range []*swhv1alpha1.ServiceWithHealthchecks{
		resource(ns, "mysql-write", ports, mysqlProbe("SELECT @@read_only = 0", "sql-credentials")),
		resource(ns, "mysql-read", ports, mysqlProbe("SELECT 1", "sql-credentials")),
		resource(ns, "mysql-wrong", ports, mysqlProbe("SELECT 1", "wrong-credentials")),
	} {
		r.Spec.Selector = map[string]string{"app": "sql"}
		if err := controlPlane.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	waitPortState(t, ns, "mysql-write", "mysql", "sql-a", "ready")
	waitPortState(t, ns, "mysql-write", "mysql", "sql-b", "not ready: query-false")
	waitPortState(t, ns, "mysql-read", "mysql", "sql-a", "ready")
	waitPortState(t, ns, "mysql-read", "mysql", "sql-b", "ready")
	waitPortState(t, ns, "mysql-wrong", "mysql", "sql-a", "not ready: auth")

	// The failover.
	if err := primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	waitPortState(t, ns, "mysql-write", "mysql", "sql-b", "ready")
	waitPortState(t, ns, "mysql-write", "mysql", "sql-a", "not ready: query-false")
}
