package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/test/harness"
)

// replicated starts a primary db-0 on node-a and a streaming replica per
// node in nodes (db-1, db-2, …), their pods labelled app=db, and the
// Secret db-credentials of the primary's superuser.
func replicated(t *testing.T, ns string, nodes ...string) (*harness.Postgres, []*harness.Postgres) {
	t.Helper()
	ips := harness.PodIPs(t, 1+len(nodes))
	primary := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ips[0]})
	dbPod(t, ns, "db-0", nodeA, ips[0])
	var replicas []*harness.Postgres
	for i, node := range nodes {
		replicas = append(replicas, primary.StartTestReplica(t, ips[1+i], 5432))
		dbPod(t, ns, fmt.Sprintf("db-%d", 1+i), node, ips[1+i])
	}
	credentials(t, ns, "db-credentials", primary)
	return primary, replicas
}

// lagUnderWrites pauses the replicas' replay and inserts a row on the
// primary every 50 ms until the test ends: WAL waits to be replayed.
func lagUnderWrites(ctx context.Context, t *testing.T, primary *harness.Postgres, replicas ...*harness.Postgres) {
	t.Helper()
	if err := primary.Exec(ctx, "CREATE TABLE load (n int)"); err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		if err := r.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
			t.Fatal(err)
		}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { stopLoad(); <-done })
	go func() {
		defer close(done)
		for loadCtx.Err() == nil {
			_ = primary.Exec(loadCtx, "INSERT INTO load VALUES (1)")
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// TestReplicationLagWithdrawsAReplica: db-read bounds the replicas' lag;
// a replica whose replay is paused under writes leaves it with reason
// replication-lag, and comes back once it replays.
func TestReplicationLagWithdrawsAReplica(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := namespace(t)
	primary, replicas := replicated(t, ns, nodeB)
	replica := replicas[0]
	probe := postgresProbe("SELECT 1", "db-credentials")
	seconds := int32(2)
	probe.PostgreSQL.MaxReplicationLag = &swhv1alpha1.PostgreSQLReplicationLag{Seconds: &seconds}
	swh := resource(ns, "db-read", []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}, probe)
	swh.Spec.Selector = map[string]string{"app": "db"}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:TTF"})

	lagUnderWrites(ctx, t, primary, replica)
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:FFF"})
	waitReason(t, ns, "db-read", "db-1", string(probes.ReasonReplicationLag))

	if err := replica.Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "db-read", map[string]string{"db-read-node-a": "db-0:TTF", "db-read-node-b": "db-1:TTF"})
}

// TestReplicationLagFloor: both replicas lag together. Without a floor
// they both leave db-read; with keepAtLeast 2 they stay (the primary
// alone is fewer than 2), marked replication-lag-kept; once one replays
// again, two pods pass and the other, still lagging, leaves.
func TestReplicationLagFloor(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := namespace(t)
	primary, replicas := replicated(t, ns, nodeB, nodeA)
	seconds, floor := int32(2), int32(2)
	for name, keep := range map[string]*int32{"floored": &floor, "unfloored": nil} {
		probe := postgresProbe("SELECT 1", "db-credentials")
		probe.PostgreSQL.MaxReplicationLag = &swhv1alpha1.PostgreSQLReplicationLag{Seconds: &seconds, KeepAtLeast: keep}
		swh := resource(ns, name, []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}, probe)
		swh.Spec.Selector = map[string]string{"app": "db"}
		if err := controlPlane.Client.Create(ctx, swh); err != nil {
			t.Fatal(err)
		}
	}
	all := func(name string) map[string]string {
		return map[string]string{name + "-node-a": "db-0:TTF,db-2:TTF", name + "-node-b": "db-1:TTF"}
	}
	waitPublished(t, ns, "floored", all("floored"))
	waitPublished(t, ns, "unfloored", all("unfloored"))
	x := watchExclusive(t, ns, "floored", "")
	x.wait(t, 10*time.Second, "db-0", "db-1", "db-2")
	x.resetFewest()

	lagUnderWrites(ctx, t, primary, replicas...)
	waitPublished(t, ns, "unfloored", map[string]string{"unfloored-node-a": "db-0:TTF,db-2:FFF", "unfloored-node-b": "db-1:FFF"})
	waitReason(t, ns, "floored", "db-1", swhv1alpha1.ReasonReplicationLagKept)
	waitReason(t, ns, "floored", "db-2", swhv1alpha1.ReasonReplicationLagKept)
	waitPublished(t, ns, "floored", all("floored"))
	// The replicas started to lag together: never fewer than the floor
	// routable, not even for the moment before the other was marked
	// kept. (One may leave for a moment while the other still passes.)
	if n := x.fewestRoutable(); n < int(floor) {
		t.Fatalf("while both replicas started to lag, only %d pods were routable on the floored resource, below its floor %d", n, floor)
	}

	if err := replicas[0].Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "floored", map[string]string{"floored-node-a": "db-0:TTF,db-2:FFF", "floored-node-b": "db-1:TTF"})
	waitReason(t, ns, "floored", "db-2", string(probes.ReasonReplicationLag))
}
