package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/netns"
)

// 11. Two primaries (a replica promoted while the old primary runs on):
// the exclusive write port sends every connection to one of them, through
// kube-proxy, while the same resource without exclusive splits them. The
// holder is fenced (its write query turns false): its clients' sessions,
// held through kube-proxy, are ended and no commit lands on it 2 s after
// its withdrawal. Then the new holder's agent dies (its node cut off from
// the API server): after the Lease expires, the other primary gets the
// writes. Then that one stops: the first, whose agent is back, gets them.
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
	// The probe's role may end sessions and read the fence, nothing more;
	// the application's writes a table.
	for _, q := range []string{
		"CREATE ROLE swh_probe LOGIN PASSWORD 'probe-password'",
		"GRANT pg_signal_backend TO swh_probe",
		"CREATE TABLE fence (since timestamptz)",
		"GRANT SELECT ON fence TO swh_probe",
		"CREATE ROLE app LOGIN PASSWORD 'app-password'",
		"CREATE TABLE commits (server text, at timestamptz DEFAULT now())",
		"GRANT INSERT, SELECT ON commits TO app",
	} {
		if err := primary.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	replica, err := p1.StartReplica(ctx, primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Close() })
	o := primary.Options()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "db-credentials"},
		StringData: map[string]string{"user": "swh_probe", "password": "probe-password"}}
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
	writeProbe := postgresProbe("SELECT NOT pg_is_in_recovery() AND NOT EXISTS (SELECT 1 FROM fence)", "db-credentials")
	writeProbe.PostgreSQL.CloseSessions = swhv1alpha1.CloseSessionsOnExclusiveWithdrawal
	start := time.Now()
	write := f.swh("xdb-write", "xdb", exclusive, port, writeProbe)
	split := f.swh("xdb-split", "xdb", slower, port, writeProbe)
	dsn := func(svc *corev1.Service, user, password string) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: hostPort(svc.Spec.ClusterIP, 5432),
			Path: "/postgres", RawQuery: "sslmode=disable&connect_timeout=5"}
		return u.String()
	}
	client := n[2].Client.NS
	writeReq := PostgresServer(client, dsn(write, o.User, o.Password), cluster.PodByIP)
	splitReq := PostgresServer(client, dsn(split, o.User, o.Password), cluster.PodByIP)
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

	// An application holds connections through the exclusive port and
	// commits; the holder is fenced.
	writer := startWriter(f.ctx, client, dsn(write, "app", "app-password"))
	defer writer.stop()
	harness.Eventually(t, 30*time.Second, "the application commits on xdb-0", func() error { return writer.committedOn("xdb-0") })
	fenced := time.Now()
	if err := primary.Exec(ctx, "INSERT INTO fence VALUES (now())"); err != nil {
		t.Fatal(err)
	}
	withdrawn := fenced.Add(f.waitSlices("xdb-0 withdrawn", "xdb-write", fenced, func(s []discoveryv1.EndpointSlice) bool {
		return !routable(s, "xdb-0")
	}))
	time.Sleep(time.Until(withdrawn.Add(2 * time.Second)))
	var sessions int
	if err := primary.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'", &sessions); err != nil {
		t.Fatal(err)
	}
	if sessions != 0 {
		t.Errorf("%d sessions of the application on xdb-0 2 s after its withdrawal", sessions)
	}
	harness.Eventually(t, 30*time.Second, "the application commits on xdb-1", func() error { return writer.committedOn("xdb-1") })
	last := writer.lastOn("xdb-0")
	late := last.Sub(withdrawn)
	if late > 2*time.Second {
		t.Errorf("a commit landed on xdb-0 %s after its withdrawal", late.Round(time.Millisecond))
	}
	t.Logf("fenced: xdb-0 withdrawn %s after the fence; %d application sessions on it 2 s later; its last commit %s after the withdrawal; %s",
		withdrawn.Sub(fenced).Round(time.Millisecond), sessions, late.Round(time.Millisecond), writer)
	report.Add(Row{Scenario: f.scenario, Step: "fenced holder: sessions closed, writes moved", Converge: withdrawn.Sub(fenced)})
	if err := primary.Exec(ctx, "DELETE FROM fence"); err != nil {
		t.Fatal(err)
	}

	// The holder's node loses the API server: its agent can renew nothing.
	n[1].Agent.Kill()
	agentBack := false
	t.Cleanup(func() { // a failed step leaves the scenarios after this one an agent
		if agentBack {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := n[1].StartAgent(ctx); err != nil {
			t.Errorf("restarting %s's agent after a failed step: %v", n[1].Name, err)
		}
	})
	start = time.Now()
	f.converge(start, ex("holder's agent cut off: exclusive on the other primary", writeReq, 60, "xdb-0"))
	agentBack = true
	if err := n[1].StartAgent(f.ctx); err != nil {
		t.Fatal(err)
	}
	// Back, it finds the port held and keeps xdb-1 standing by.
	time.Sleep(3 * time.Second)
	f.converge(time.Now(), ex("agent back: exclusive still on xdb-0", writeReq, 60, "xdb-0"))

	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	f.converge(start, ex("holder stops: exclusive on xdb-1", writeReq, 60, "xdb-1"))
}

// routable reports whether slices publish pod ready or serving.
func routable(slices []discoveryv1.EndpointSlice, pod string) bool {
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Name != pod {
				continue
			}
			if ready, serving, _ := endpoints.Conditions(ep.Conditions); ready || serving {
				return true
			}
		}
	}
	return false
}

// writer is an application that commits through a Service on one
// connection at a time, reconnecting when it ends, and remembers where
// each commit landed and when.
type writer struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	last    map[string]time.Time
	commits map[string]int
	errors  int
}

func startWriter(ctx context.Context, ns *netns.Namespace, dsn string) *writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &writer{cancel: cancel, done: make(chan struct{}), last: map[string]time.Time{}, commits: map[string]int{}}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.session(ctx, ns, dsn)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// session commits on one connection until it fails.
func (w *writer) session(ctx context.Context, ns *netns.Namespace, dsn string) {
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		return
	}
	connector.Dialer(nsDialer{ns})
	db := sql.OpenDB(connector)
	defer func() { _ = db.Close() }()
	conn, err := db.Conn(ctx)
	if err != nil {
		w.failed()
		return
	}
	defer func() { _ = conn.Close() }()
	for ctx.Err() == nil {
		var server string
		qctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := conn.QueryRowContext(qctx, "INSERT INTO commits (server) VALUES (host(inet_server_addr())) RETURNING server").Scan(&server)
		cancel()
		if err != nil {
			w.failed()
			return
		}
		w.mu.Lock()
		pod := cluster.PodByIP(server)
		w.last[pod] = time.Now()
		w.commits[pod]++
		w.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *writer) failed() {
	w.mu.Lock()
	w.errors++
	w.mu.Unlock()
}

func (w *writer) committedOn(pod string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.last[pod]) > time.Second {
		return fmt.Errorf("commits: %v", w.commits)
	}
	return nil
}

func (w *writer) lastOn(pod string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[pod]
}

func (w *writer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("commits %v, %d failed sessions or commits", w.commits, w.errors)
}

func (w *writer) stop() {
	w.cancel()
	<-w.done
}
