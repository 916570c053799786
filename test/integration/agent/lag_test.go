package agent_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/test/harness"
)

// TestReplicationLagWithdrawsAReplica: db-read bounds the replicas' lag;
// a replica whose replay is paused under writes leaves it with reason
// replication-lag, and comes back once it replays.
func TestReplicationLagWithdrawsAReplica(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := namespace(t)
	ips := harness.PodIPs(t, 2)
	primary := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ips[0]})
	replica := primary.StartTestReplica(t, ips[1], 5432)
	dbPod(t, ns, "db-0", nodeA, ips[0])
	dbPod(t, ns, "db-1", nodeB, ips[1])
	credentials(t, ns, "db-credentials", primary)
	probe := postgresProbe("SELECT 1", "db-credentials")
	seconds := int32(2)
	probe.PostgreSQL.MaxReplicationLag = &swhv1alpha1.PostgreSQLReplicationLag{Seconds: &seconds}
	swh := resource(ns, "db-read", []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}, probe)
	swh.Spec.Selector = map[string]string{"app": "db"}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:TTF"})

	if err := primary.Exec(ctx, "CREATE TABLE load (n int)"); err != nil {
		t.Fatal(err)
	}
	if err := replica.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		t.Fatal(err)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go func() {
		for loadCtx.Err() == nil {
			_ = primary.Exec(loadCtx, "INSERT INTO load VALUES (1)")
			time.Sleep(50 * time.Millisecond)
		}
	}()
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:FFF"})
	waitReason(t, ns, "db-read", "db-1", string(probes.ReasonReplicationLag))

	if err := replica.Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:TTF"})
}
