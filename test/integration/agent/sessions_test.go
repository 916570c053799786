package agent_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// TestCloseSessionsOnWithdrawal: a primary withdrawn from an exclusive
// write port (its probe's query turns false) has its clients' sessions
// ended by the agent, with a role that holds pg_signal_backend and a
// SELECT, within 2 s of the slice watch seeing the withdrawal.
func TestCloseSessionsOnWithdrawal(t *testing.T) {
	startAgent(t, nodeA)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := namespace(t)
	ip := harness.PodIP(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	for _, q := range []string{
		"CREATE ROLE swh_probe LOGIN PASSWORD 'probe-password'",
		"GRANT pg_signal_backend TO swh_probe",
		"CREATE ROLE app LOGIN PASSWORD 'app-password'",
		"CREATE TABLE fence (since timestamptz)",
		"GRANT SELECT ON fence TO swh_probe",
	} {
		if err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dbPod(t, ns, "db-0", nodeA, ip)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"},
		StringData: map[string]string{"user": "swh_probe", "password": "probe-password"}}
	if err := controlPlane.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	x := watchExclusive(t, ns, "db", "write")
	probe := postgresProbe("SELECT NOT pg_is_in_recovery() AND NOT EXISTS (SELECT 1 FROM fence)", "db-credentials")
	probe.PostgreSQL.CloseSessions = swhv1alpha1.CloseSessionsOnExclusiveWithdrawal
	swh := resource(ns, "db", []swhv1alpha1.ServicePort{{Name: "write", Port: 5432, TargetPort: intstr.FromString("postgres")}}, probe)
	swh.Spec.Selector = map[string]string{"app": "db"}
	swh.Spec.Exclusive = &swhv1alpha1.Exclusive{LeaseDurationSeconds: 3}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	x.wait(t, 30*time.Second, "db-0")
	var sessions []*sql.Conn
	for range 3 {
		sessions = append(sessions, pg.Session(ctx, t, "app", "app-password", "orders"))
	}

	if err := pg.Exec(ctx, "INSERT INTO fence VALUES (now())"); err != nil {
		t.Fatal(err)
	}
	withdrawn := x.wait(t, 30*time.Second)
	for i, c := range sessions {
		harness.Eventually(t, 5*time.Second, "session ended", func() error {
			var one int
			if c.QueryRowContext(ctx, "SELECT 1").Scan(&one) == nil {
				return errAlive
			}
			return nil
		})
		if took := time.Since(withdrawn); took > 2*time.Second {
			t.Errorf("session %d still answered %s after the withdrawal", i, took.Round(time.Millisecond))
		}
	}
	t.Logf("3 client sessions ended %s after the slice watch saw the withdrawal", time.Since(withdrawn).Round(time.Millisecond))
	harness.Eventually(t, 10*time.Second, "a SessionsClosed event", func() error {
		list, err := agentEvents(ctx, ns, "db-0", swhv1alpha1.EventReasonSessionsClosed)
		if err != nil || len(list) == 0 {
			return fmt.Errorf("events: %v %v", list, err)
		}
		return nil
	})
}

var errAlive = errors.New("the session still answers")
