package e2e

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// The scenarios run in this order; the last one loses node-3 for good.

var webPort = []swhv1alpha1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}}

func webURL(svc *corev1.Service) string { return "http://" + hostPort(svc.Spec.ClusterIP, 80) + "/" }

// 1. ClusterIP: only pods passing their port's probes get requests; a
// backend made to fail drops out once its failure threshold is reached and
// comes back after recovery.
func TestClusterIP(t *testing.T) {
	f := newFixture(t, "1 ClusterIP")
	n := cluster.Nodes
	a, b, c := f.pod(n[0], "web-a", "web", nil), f.pod(n[1], "web-b", "web", nil), f.pod(n[2], "web-c", "web", nil)
	f.http(a, 8080, false)
	bb := f.http(b, 8080, false)
	f.http(c, 8080, true) // never passes
	start := time.Now()
	svc := f.swh("web", "web", nil, webPort, httpProbe(intstr.FromInt32(8080)))
	req := HTTPGet(n[0].Client.NS, webURL(svc))
	f.converge(start, ex("only passing pods (web-c fails)", req, 200, "web-a", "web-b"))

	bb.SetFailed(true)
	start = time.Now()
	f.converge(start, ex("web-b fails: drops out", req, 200, "web-a"))

	bb.SetFailed(false)
	start = time.Now()
	f.converge(start, ex("web-b recovers: back in", req, 200, "web-a", "web-b"))
}

// 2. Per-port independence: failing web's probe stops web traffic to the
// pod while its smtp traffic continues without a single failure.
func TestPerPortIndependence(t *testing.T) {
	f := newFixture(t, "2 per-port independence")
	n := cluster.Nodes
	ports := map[string]int32{"web": 8080, "smtp": 2525}
	a, b := f.pod(n[0], "mail-a", "mail", ports), f.pod(n[1], "mail-b", "mail", ports)
	wa := f.http(a, 8080, false)
	f.http(b, 8080, false)
	f.banner(a, 2525)
	f.banner(b, 2525)
	start := time.Now()
	svc := f.swh("mail", "mail", nil, []swhv1alpha1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromString("web")},
		{Name: "smtp", Port: 25, TargetPort: intstr.FromString("smtp")},
	}, httpProbe(intstr.FromString("web")), tcpProbe(intstr.FromString("smtp")))
	client := n[2].Client.NS
	web, smtp := HTTPGet(client, webURL(svc)), Banner(client, hostPort(svc.Spec.ClusterIP, 25))
	f.converge(start,
		ex("web on both", web, 100, "mail-a", "mail-b"),
		ex("smtp on both", smtp, 100, "mail-a", "mail-b"))

	loop := StartLoop(f.ctx, smtp)
	wa.SetFailed(true)
	start = time.Now()
	f.converge(start,
		ex("mail-a web fails: web only on mail-b", web, 200, "mail-b"),
		ex("mail-a web fails: smtp still on both", smtp, 100, "mail-a", "mail-b"))
	f.loopResult("smtp loop while mail-a's web fails", time.Since(start), loop.Stop(), "mail-a", "mail-b")
}

// 3. A pod-wide health port: its failure stops traffic on every port.
func TestPodWideHealthPort(t *testing.T) {
	f := newFixture(t, "3 pod-wide health port")
	n := cluster.Nodes
	ports := map[string]int32{"web": 8080, "smtp": 2525, "health": 8086}
	a, b := f.pod(n[1], "app-a", "app", ports), f.pod(n[2], "app-b", "app", ports)
	for _, p := range []*Pod{a, b} {
		f.http(p, 8080, false)
		f.banner(p, 2525)
	}
	ha := f.http(a, 8086, false)
	f.http(b, 8086, false)
	start := time.Now()
	svc := f.swh("app", "app", nil, []swhv1alpha1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromString("web")},
		{Name: "smtp", Port: 25, TargetPort: intstr.FromString("smtp")},
	}, httpProbe(intstr.FromInt32(8086)))
	client := n[0].Client.NS
	web, smtp := HTTPGet(client, webURL(svc)), Banner(client, hostPort(svc.Spec.ClusterIP, 25))
	f.converge(start,
		ex("web on both", web, 100, "app-a", "app-b"),
		ex("smtp on both", smtp, 100, "app-a", "app-b"))

	ha.SetFailed(true)
	start = time.Now()
	f.converge(start,
		ex("app-a health fails: web only on app-b", web, 100, "app-b"),
		ex("app-a health fails: smtp only on app-b", smtp, 100, "app-b"))

	ha.SetFailed(false)
	start = time.Now()
	f.converge(start,
		ex("app-a health recovers: web on both", web, 100, "app-a", "app-b"),
		ex("app-a health recovers: smtp on both", smtp, 100, "app-a", "app-b"))
}

// 4. The database example: db-write lands only on the primary, and on the
// promoted replica once the old primary is stopped; db-read spreads over
// every healthy member.
func TestDatabase(t *testing.T) {
	f := newFixture(t, "4 database")
	n := cluster.Nodes
	ports := map[string]int32{"postgres": 5432}
	p0, p1 := f.pod(n[0], "db-0", "db", ports), f.pod(n[1], "db-1", "db", ports)
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Minute)
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
	port := []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}
	start := time.Now()
	// A PostgreSQL login takes longer than a TCP connect: 2 s period, 2 s
	// timeout.
	slower := func(r *swhv1alpha1.ServiceWithHealthchecks) { r.Spec.Healthcheck.PeriodSeconds = 2 }
	write := f.swh("db-write", "db", slower, port, postgresProbe("SELECT NOT pg_is_in_recovery()", "db-credentials"))
	read := f.swh("db-read", "db", slower, port, postgresProbe("SELECT 1", "db-credentials"))
	dsn := func(svc *corev1.Service) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(o.User, o.Password), Host: hostPort(svc.Spec.ClusterIP, 5432),
			Path: "/postgres", RawQuery: "sslmode=disable&connect_timeout=5"}
		return u.String()
	}
	client := n[2].Client.NS
	writeReq, readReq := PostgresServer(client, dsn(write), cluster.PodByIP), PostgresServer(client, dsn(read), cluster.PodByIP)
	f.converge(start,
		ex("db-write on the primary", writeReq, 60, "db-0"),
		ex("db-read on both", readReq, 60, "db-0", "db-1"))

	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	f.converge(start,
		ex("failover: db-write on the new primary", writeReq, 60, "db-1"),
		ex("failover: db-read on the healthy member", readReq, 60, "db-1"))
}

// 5. externalTrafficPolicy Local: each node's NodePort reaches only its own
// passing pods, and its healthCheckNodePort reports them.
func TestLocalTrafficPolicy(t *testing.T) {
	f := newFixture(t, "5 externalTrafficPolicy Local")
	n := cluster.Nodes
	l1a, l1b, l2a, l3a := f.pod(n[0], "loc-1a", "loc", nil), f.pod(n[0], "loc-1b", "loc", nil), f.pod(n[1], "loc-2a", "loc", nil), f.pod(n[2], "loc-3a", "loc", nil)
	f.http(l1a, 8080, false)
	b1b := f.http(l1b, 8080, false)
	b2a := f.http(l2a, 8080, false)
	b3a := f.http(l3a, 8080, true)
	start := time.Now()
	f.swh("loc", "loc", func(r *swhv1alpha1.ServiceWithHealthchecks) {
		r.Spec.Type = corev1.ServiceTypeLoadBalancer
		r.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}, webPort, httpProbe(intstr.FromInt32(8080)))
	svc := f.service("loc", func(s *corev1.Service) bool {
		return s.Spec.HealthCheckNodePort != 0 && len(s.Spec.Ports) == 1 && s.Spec.Ports[0].NodePort != 0
	})
	nodePort, hc := svc.Spec.Ports[0].NodePort, svc.Spec.HealthCheckNodePort
	via := func(node *Node) Request {
		// A node without local endpoints drops requests: they time out.
		return HTTPGetWithin(cluster.External, "http://"+hostPort(node.IP, nodePort)+"/", 2*time.Second)
	}
	// check awaits, on every node at once, its healthCheckNodePort
	// counting its passing pods and its NodePort reaching only them.
	check := func(step string, since time.Time, want map[*Node][]string) {
		counts := map[*Node]int{}
		var exps []Expect
		for _, node := range n {
			pods := want[node]
			counts[node] = len(pods)
			what := fmt.Sprintf("%s: NodePort of %s", step, node.Name)
			if len(pods) == 0 {
				exps = append(exps, ex(what+" reaches nothing", via(node), 8))
				continue
			}
			exps = append(exps, ex(what, via(node), 100, pods...))
		}
		f.waitHealthChecks(step, since, hc, counts)
		f.converge(since, exps...)
	}
	check("initial", start, map[*Node][]string{n[0]: {"loc-1a", "loc-1b"}, n[1]: {"loc-2a"}})

	b1b.SetFailed(true)
	b2a.SetFailed(true)
	b3a.SetFailed(false)
	start = time.Now()
	check("loc-1b, loc-2a fail; loc-3a recovers", start, map[*Node][]string{n[0]: {"loc-1a"}, n[2]: {"loc-3a"}})

	b1b.SetFailed(false)
	b2a.SetFailed(false)
	start = time.Now()
	check("loc-1b, loc-2a recover", start, map[*Node][]string{n[0]: {"loc-1a", "loc-1b"}, n[1]: {"loc-2a"}, n[2]: {"loc-3a"}})
}

// 6. A terminating pod that still passes its probes keeps serving as
// kube-proxy's fallback when no endpoint is ready.
func TestTerminatingFallback(t *testing.T) {
	f := newFixture(t, "6 terminating fallback")
	n := cluster.Nodes
	a, b := f.pod(n[0], "term-a", "term", nil), f.pod(n[1], "term-b", "term", nil)
	f.http(a, 8080, false)
	bb := f.http(b, 8080, false)
	start := time.Now()
	svc := f.swh("term", "term", nil, webPort, httpProbe(intstr.FromInt32(8080)))
	req := HTTPGet(n[2].Client.NS, webURL(svc))
	f.converge(start, ex("both ready", req, 100, "term-a", "term-b"))

	// No kubelet confirms the deletion: term-a stays terminating.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "term-a"}}
	if err := f.c().Delete(f.ctx, pod, client.GracePeriodSeconds(600)); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	f.converge(start, ex("term-a terminating, term-b ready", req, 100, "term-b"))

	bb.SetFailed(true)
	start = time.Now()
	f.converge(start, ex("term-b fails: terminating term-a serves", req, 100, "term-a"))
	f.waitSlices("term-a published as serving and terminating", "term", time.Now(), func(s []discoveryv1.EndpointSlice) bool {
		for _, sl := range s {
			for _, ep := range sl.Endpoints {
				if ep.TargetRef != nil && ep.TargetRef.Name == "term-a" {
					c := ep.Conditions
					return c.Ready != nil && !*c.Ready && c.Serving != nil && *c.Serving && c.Terminating != nil && *c.Terminating
				}
			}
		}
		return false
	})
}

// 7. Migration: a plain Service served by the built-in EndpointSlice
// controller is adopted under a continuous client loop: no failed request,
// the same cluster IP, and the built-in controller's slices gone.
func TestMigration(t *testing.T) {
	f := newFixture(t, "7 migration")
	n := cluster.Nodes
	a, b := f.pod(n[0], "shop-a", "shop", nil), f.pod(n[1], "shop-b", "shop", nil)
	f.http(a, 8080, false)
	f.http(b, 8080, false)
	plain := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "shop"},
			Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	start := time.Now()
	if err := f.c().Create(f.ctx, plain); err != nil {
		t.Fatal(err)
	}
	const builtin = "endpointslice-controller.k8s.io"
	f.waitSlices("the built-in controller publishes", "shop", start, func(s []discoveryv1.EndpointSlice) bool {
		return len(s) > 0 && s[0].Labels[discoveryv1.LabelManagedBy] == builtin && len(s[0].Endpoints) == 2
	})
	f.programmed(plain)
	req := HTTPGet(n[2].Client.NS, webURL(plain))
	f.converge(start, ex("plain Service, built-in slices", req, 100, "shop-a", "shop-b"))

	loop := StartLoop(f.ctx, req)
	start = time.Now()
	f.swh("shop", "shop", func(r *swhv1alpha1.ServiceWithHealthchecks) {
		r.Annotations = map[string]string{"network.swh.dev/adopt": "true"}
	}, webPort, httpProbe(intstr.FromInt32(8080)))
	took := f.waitSlices("adopted: only the agents' slices", "shop", start, func(s []discoveryv1.EndpointSlice) bool {
		ours := 0
		for _, sl := range s {
			if sl.Labels[discoveryv1.LabelManagedBy] == builtin {
				return false
			}
			ours += len(sl.Endpoints)
		}
		return ours == 2
	})
	// Keep the loop going over the new slices for a while.
	awaitRequests(t, loop, 300)
	f.loopResult("client loop through the adoption", took, loop.Stop(), "shop-a", "shop-b")
	after := f.service("shop", func(*corev1.Service) bool { return true })
	if after.Spec.ClusterIP != plain.Spec.ClusterIP || after.Spec.Selector != nil {
		t.Errorf("after the adoption: cluster IP %s (was %s), selector %v", after.Spec.ClusterIP, plain.Spec.ClusterIP, after.Spec.Selector)
	}
	for _, sl := range f.slices("shop") {
		if sl.Labels[discoveryv1.LabelManagedBy] == builtin {
			t.Errorf("the built-in controller's slice %s is back", sl.Name)
		}
	}
}

// 8. Agent restarts under a continuous client loop: no failed request.
// node-1's and node-3's agents are stopped (SIGTERM, as in a rolling
// update), node-2's is killed (SIGKILL, as in a crash).
func TestAgentRestart(t *testing.T) {
	f := newFixture(t, "8 agent restarts")
	n := cluster.Nodes
	var want []string
	for i, node := range n {
		name := fmt.Sprintf("rs-%d", i+1)
		f.http(f.pod(node, name, "rs", nil), 8080, false)
		want = append(want, name)
	}
	start := time.Now()
	svc := f.swh("rs", "rs", nil, webPort, httpProbe(intstr.FromInt32(8080)))
	req := HTTPGet(n[0].Client.NS, webURL(svc))
	f.converge(start, ex("all three", req, 100, want...))

	loop := StartLoop(f.ctx, req)
	start = time.Now()
	for i, node := range n {
		if i == 1 {
			node.Agent.Kill() // a crash
		} else {
			node.Agent.Stop() // a rolling update
		}
		if err := node.StartAgent(f.ctx); err != nil {
			t.Fatal(err)
		}
		// Let the new agent probe and sync before the next restart.
		awaitRequests(t, loop, loop.Snapshot().Total+100)
	}
	f.loopResult("client loop through a restart of every agent (one killed)", time.Since(start), loop.Stop(), want...)
}

// 9. A node unreachable: the machine drops off the network (its link goes
// down), its heartbeats, agent and kube-proxy stop, and its Node object
// stays. After the grace period the node lifecycle controller marks it
// Ready=Unknown; the controller then withdraws its endpoints, and the
// other nodes' clients reach only the remaining pods. When the machine
// returns (heartbeats, Ready, kube-proxy and agent again), its pod serves
// again without a manual step.
func TestNodeUnreachable(t *testing.T) {
	f := newFixture(t, "9 node unreachable")
	n := cluster.Nodes
	var want []string
	for i, node := range n {
		name := fmt.Sprintf("nu-%d", i+1)
		f.http(f.pod(node, name, "nu", nil), 8080, false)
		want = append(want, name)
	}
	start := time.Now()
	svc := f.swh("nu", "nu", nil, webPort, httpProbe(intstr.FromInt32(8080)))
	from1, from2 := HTTPGet(n[0].Client.NS, webURL(svc)), HTTPGet(n[1].Client.NS, webURL(svc))
	f.converge(start, ex("all three, from node-1", from1, 100, want...))

	lost := n[2]
	if err := lost.Unplug(); err != nil {
		t.Fatal(err)
	}
	lost.StopHeartbeat()
	lost.Agent.Kill()
	lost.Proxy.Kill()
	// The machine comes back: network, heartbeats, a Ready status, then its
	// kube-proxy and agent, as after a reboot. After a failed step, the
	// cleanup finishes the steps not done, for the scenarios after this one.
	back := []func(context.Context) error{
		func(context.Context) error { return lost.Plug() },
		func(context.Context) error { return lost.StartHeartbeat() },
		func(ctx context.Context) error {
			_, err := harness.SetNodeReady(ctx, f.c(), lost.Name, corev1.ConditionTrue)
			return err
		},
		func(context.Context) error { return lost.StartProxy() },
		func(ctx context.Context) error { return lost.StartAgent(ctx) },
	}
	restore := func(ctx context.Context) error {
		for len(back) > 0 {
			if err := back[0](ctx); err != nil {
				return err
			}
			back = back[1:]
		}
		return nil
	}
	t.Cleanup(func() {
		if len(back) == 0 {
			return
		}
		// The fixture's context may be what ran out.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := restore(ctx); err != nil {
			t.Errorf("bringing %s back after a failed step: %v", lost.Name, err)
		}
	})
	start = time.Now()
	// When the node lifecycle controller changed the condition: its
	// lastTransitionTime (whole seconds, so up to 1 s early) and when this
	// test first saw it (polled every 20 ms, so a little late).
	var changed, seen time.Time
	for deadline := start.Add(convergeTimeout); changed.IsZero(); time.Sleep(20 * time.Millisecond) {
		node := &corev1.Node{}
		if err := f.c().Get(f.ctx, types.NamespacedName{Name: lost.Name}, node); err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				changed, seen = c.LastTransitionTime.Time, time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s still Ready %v after its heartbeats stopped", lost.Name, convergeTimeout)
		}
	}
	t.Logf("%s: Ready=Unknown %v after its heartbeats stopped (grace period %v)", lost.Name, seen.Sub(start).Round(100*time.Millisecond), nodeMonitorGracePeriod)
	sinceSeen := f.waitSlices("node-3's endpoints withdrawn", "nu", seen, func(s []discoveryv1.EndpointSlice) bool {
		found := false
		for _, sl := range s {
			for _, ep := range sl.Endpoints {
				if ep.NodeName != nil && *ep.NodeName == lost.Name {
					found = true
					if ep.Conditions.Serving == nil || *ep.Conditions.Serving || ep.Conditions.Ready == nil || *ep.Conditions.Ready {
						return false
					}
				}
			}
		}
		return found // withdrawn, not deleted: the Node is still there
	})
	sinceChanged := sinceSeen + seen.Sub(changed)
	report.Add(Row{Scenario: f.scenario, Step: "node-3 Ready=Unknown seen -> endpoints withdrawn", Converge: sinceSeen})
	report.Add(Row{Scenario: f.scenario, Step: "node-3 Ready=Unknown (its timestamp) -> withdrawn", Converge: sinceChanged})
	t.Logf("node-3's endpoints withdrawn %v after the test saw Ready=Unknown, %v after the condition's (whole-second) timestamp",
		sinceSeen.Round(10*time.Millisecond), sinceChanged.Round(10*time.Millisecond))
	f.converge(start,
		ex("node-3 unreachable: from node-1", from1, 100, "nu-1", "nu-2"),
		ex("node-3 unreachable: from node-2", from2, 100, "nu-1", "nu-2"))

	if err := restore(f.ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	f.converge(start,
		ex("node-3 back: from node-1", from1, 100, want...),
		ex("node-3 back: from node-2", from2, 100, want...))
}

// 10. A node lost: its agent and kube-proxy stop and its Node goes; its
// slices are cleaned up and the other nodes' clients reach only the
// remaining pods. Runs last: node-3 stays lost.
func TestNodeLost(t *testing.T) {
	f := newFixture(t, "10 node lost")
	n := cluster.Nodes
	var want []string
	for i, node := range n {
		name := fmt.Sprintf("nl-%d", i+1)
		f.http(f.pod(node, name, "nl", nil), 8080, false) // nl-3 keeps answering
		want = append(want, name)
	}
	start := time.Now()
	svc := f.swh("nl", "nl", nil, webPort, httpProbe(intstr.FromInt32(8080)))
	from1, from2 := HTTPGet(n[0].Client.NS, webURL(svc)), HTTPGet(n[1].Client.NS, webURL(svc))
	f.converge(start, ex("all three, from node-1", from1, 100, want...))

	// A lost machine shuts nothing down cleanly: the agent and kube-proxy
	// are killed, so only the controller can clean up after them.
	lost := n[2]
	lost.StopHeartbeat()
	lost.Agent.Kill()
	lost.Proxy.Kill()
	start = time.Now()
	if err := f.c().Delete(f.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: lost.Name}}); err != nil {
		t.Fatal(err)
	}
	took := f.waitSlices("the lost node's slices cleaned up", "nl", start, func(s []discoveryv1.EndpointSlice) bool {
		for _, sl := range s {
			for _, ep := range sl.Endpoints {
				if ep.NodeName != nil && *ep.NodeName == lost.Name {
					return false
				}
			}
		}
		return len(s) > 0
	})
	report.Add(Row{Scenario: f.scenario, Step: "node-3's slices deleted", Converge: took})
	f.converge(start,
		ex("node-3 lost: from node-1", from1, 100, "nl-1", "nl-2"),
		ex("node-3 lost: from node-2", from2, 100, "nl-1", "nl-2"))
	// Check the Node is gone for good (nothing recreated it).
	if err := f.c().Get(f.ctx, types.NamespacedName{Name: lost.Name}, &corev1.Node{}); err == nil {
		t.Errorf("node %s is back", lost.Name)
	}
}

// awaitRequests waits until loop has sent n requests; a loop that stopped
// (its context ended) fails the test with its tally instead of hanging.
func awaitRequests(t *testing.T, loop *Loop, n int) {
	t.Helper()
	harness.Eventually(t, 2*time.Minute, fmt.Sprintf("the client loop sends %d requests", n), func() error {
		if tally := loop.Snapshot(); tally.Total < n {
			return fmt.Errorf("sent %d (%d failed)", tally.Total, tally.Failed)
		}
		return nil
	})
}
