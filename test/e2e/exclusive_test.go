package e2e

import (
	"context"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// 11. Two primaries (a replica promoted while the old primary runs on):
// the exclusive write port sends every connection to one of them, through
// kube-proxy, while the same resource without exclusive splits them. The
// holder's agent then dies (its node cut off from the API server): after
// the Lease expires, the other primary gets the writes. Then that one
// stops: the first, whose agent is back, gets them again.
func TestExclusiveWritePort(t *testing.T) {
	f := newFixture(t, "11 exclusive write port")
	n := cluster.Nodes
	ports := map[string]int32{"postgres": 5432}
	p0, p1 := f.pod(n[0], "xdb-0", "xdb", ports), f.pod(n[1], "xdb-1", "xdb", ports)
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Minute)
	defer cancel()
	primary, err := p0.StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	replica, err := p1.StartReplica(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Close() })
	o := primary.Options()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db-credentials"},
		StringData: map[string]string{"user": o.User, "password": o.Password}}
	if err := f.c().Create(f.ctx, secret); err != nil {
		t.Fatal(err)
	}
	const lease = 4 * time.Second
	port := []swhv1alpha1.ServicePort{{Name: "write", Port: 5432, TargetPort: intstr.FromString("postgres")}}
	slower := func(r *swhv1alpha1.ServiceWithHealthchecks) { r.Spec.Healthcheck.PeriodSeconds = 2 }
	exclusive := func(r *swhv1alpha1.ServiceWithHealthchecks) {
		slower(r)
		r.Spec.Exclusive = &swhv1alpha1.Exclusive{LeaseDurationSeconds: int32(lease / time.Second)}
	}
	writeProbe := postgresProbe("SELECT NOT pg_is_in_recovery()", "db-credentials")
	start := time.Now()
	write := f.swh("xdb-write", "xdb", exclusive, port, writeProbe)
	split := f.swh("xdb-split", "xdb", slower, port, writeProbe)
	dsn := func(svc *corev1.Service) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(o.User, o.Password), Host: hostPort(svc.Spec.ClusterIP, 5432),
			Path: "/postgres", RawQuery: "sslmode=disable&connect_timeout=5"}
		return u.String()
	}
	client := n[2].Client.NS
	writeReq, splitReq := PostgresServer(client, dsn(write), cluster.PodByIP), PostgresServer(client, dsn(split), cluster.PodByIP)
	f.converge(start,
		ex("one primary: exclusive on it", writeReq, 40, "xdb-0"),
		ex("one primary: without exclusive on it", splitReq, 40, "xdb-0"))

	// Split brain: both answer the write query true from here on.
	loop := StartLoop(f.ctx, writeReq)
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	f.converge(start, ex("two primaries: without exclusive on both", splitReq, 60, "xdb-0", "xdb-1"))
	during := loop.Stop()
	if !during.LandsOnly("xdb-0") {
		t.Fatalf("two primaries: the exclusive port's connections landed on %s, want only xdb-0 (the holder)", during)
	}
	report.Add(Row{Scenario: f.scenario, Step: "two primaries: exclusive stays on the holder", Measured: during})
	t.Logf("two primaries: %s through the exclusive port, all on the holder", during)

	// The holder's node loses the API server: its agent can renew nothing.
	n[0].Agent.Kill()
	start = time.Now()
	f.converge(start, ex("holder's agent cut off: exclusive on the other primary", writeReq, 60, "xdb-1"))
	if err := n[0].StartAgent(f.ctx); err != nil {
		t.Fatal(err)
	}
	// Back, it finds the port held and keeps xdb-0 standing by.
	time.Sleep(3 * time.Second)
	f.converge(time.Now(), ex("agent back: exclusive still on xdb-1", writeReq, 60, "xdb-1"))

	if err := replica.Stop(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	f.converge(start, ex("holder stops: exclusive on xdb-0", writeReq, 60, "xdb-0"))
}
