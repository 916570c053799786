package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentapp "github.com/swh-dev/swh/agent/app"
	"github.com/swh-dev/swh/agent/publisher"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/test/harness"
)

// secretGets sits in a client's transport: it counts the GETs of Secrets
// and, while failing is set, answers them 500 without asking the API
// server. Nothing else is touched.
type secretGets struct {
	count   atomic.Int64
	failing atomic.Bool
}

func (s *secretGets) wrap(next http.RoundTripper) http.RoundTripper {
	secretPath := regexp.MustCompile(`^/api/v1/namespaces/[^/]+/secrets/[^/]+$`)
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet || !secretPath.MatchString(req.URL.Path) {
			return next.RoundTrip(req)
		}
		s.count.Add(1)
		if !s.failing.Load() {
			return next.RoundTrip(req)
		}
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by the test","reason":"InternalError","code":500}`
		return &http.Response{
			StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": []string{"application/json"}},
			Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
		}, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// startAgentThrough is startAgent with the agent's API traffic going
// through wrap.
func startAgentThrough(t *testing.T, node string, wrap func(http.RoundTripper) http.RoundTripper) *agent {
	t.Helper()
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.Wrap(wrap)
	a := &agent{node: node, registry: prometheus.NewRegistry(), done: make(chan error, 1)}
	mgr, err := agentapp.NewManager(cfg, agentapp.Options{
		NodeName: node, MetricsAddr: "0", HealthAddr: "0", Registry: a.registry,
		Publisher: publisher.Options{SkipNameValidation: true, SecretTTL: time.Second},
	})
	if err != nil {
		t.Fatalf("creating the agent of %s: %v", node, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	go func() { a.done <- mgr.Start(ctx) }()
	t.Cleanup(a.Stop)
	return a
}

// metric sums the agent's samples of a metric whose labels include want.
func (a *agent) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	families, err := a.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// steadySlices polls a resource's slices every 20 ms until stopped and
// collects every state other than want.
type steadySlices struct {
	stop, done chan struct{}
	mu         sync.Mutex
	seen       map[string]int
}

func watchUnchanged(ns, name string, want map[string]string) *steadySlices {
	w := &steadySlices{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]int{}}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			got, _, err := published(context.Background(), ns, name)
			if err == nil && fmt.Sprint(got) != fmt.Sprint(want) {
				w.mu.Lock()
				w.seen[fmt.Sprint(got)]++
				w.mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// verify stops the watch and fails the test if the slices left want.
func (w *steadySlices) verify(t *testing.T, during string) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var states []string
	for s, n := range w.seen {
		states = append(states, fmt.Sprintf("%s (%d observations)", s, n))
	}
	sort.Strings(states)
	if len(states) > 0 {
		t.Errorf("%s, the slices left their state:\n  %s", during, strings.Join(states, "\n  "))
	}
}

// gatedDatabase starts PostgreSQL on ip, a pod db-0 of node A for it, its
// credentials Secret and a resource name gated by a PostgreSQL probe that
// fails at the first failure, and waits until the pod is published ready.
func gatedDatabase(t *testing.T, ns, name, ip string) map[string]string {
	t.Helper()
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	dbPod(t, ns, "db-0", nodeA, ip)
	credentials(t, ns, name+"-credentials", pg)
	swh := resource(ns, name, []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}, postgresProbe("SELECT 1", name+"-credentials"))
	swh.Spec.Selector = map[string]string{"app": "db"}
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{name + "-node-a": "db-0:TTF"}
	waitPublished(t, ns, name, want)
	return want
}

// TestSecretReadErrorsKeepPostgreSQLEndpoints: once the credentials are
// known, Secret reads answered 500 for five reuse periods change nothing:
// the probes keep the last credentials read and keep passing, the reads go
// on at most once per period.
func TestSecretReadErrorsKeepPostgreSQLEndpoints(t *testing.T) {
	gets := &secretGets{}
	a := startAgentThrough(t, nodeA, gets.wrap)
	ns := namespace(t)
	want := gatedDatabase(t, ns, "blip", "10.244.60.1")

	w := watchUnchanged(ns, "blip", want)
	before := gets.count.Load()
	gets.failing.Store(true)
	time.Sleep(5 * time.Second) // five reuse periods of the test agents
	failed := gets.count.Load() - before
	gets.failing.Store(false)
	time.Sleep(2 * time.Second)
	w.verify(t, "while Secret reads failed")

	if failed < 3 || failed > 7 {
		t.Errorf("%d Secret reads in 5 s of failures with a 1 s reuse period, want about 5", failed)
	}
	if n := a.metric(t, "swh_agent_secret_reads_total", map[string]string{"outcome": "error"}); n < 3 {
		t.Errorf("swh_agent_secret_reads_total{outcome=\"error\"} = %v, want the failed reads", n)
	}
	if n := a.metric(t, "swh_agent_probe_results_total", map[string]string{"mode": "PostgreSQL", "status": "failure"}); n != 0 {
		t.Errorf("%v PostgreSQL probes failed while the Secret could not be read", n)
	}
}

// TestAPIServerPauseKeepsPostgreSQLEndpoints freezes the API server for
// four reuse periods: PostgreSQL-gated endpoints are not withdrawn, during
// the pause or after.
func TestAPIServerPauseKeepsPostgreSQLEndpoints(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	want := gatedDatabase(t, ns, "frozen", "10.244.61.1")

	w := watchUnchanged(ns, "frozen", want)
	resume, err := controlPlane.PauseAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = resume()
		}
	})
	time.Sleep(4 * time.Second)
	resumed = true
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // writes held back by the pause land now
	w.verify(t, "across the pause")
	if n := a.metric(t, "swh_agent_probe_results_total", map[string]string{"mode": "PostgreSQL", "status": "failure"}); n != 0 {
		t.Errorf("%v PostgreSQL probes failed while the API server was paused", n)
	}
}

// TestProbesOfOneSecretCostOneRead: 200 targets of one Secret probing at
// once (as one resource's targets do: they share a phase) read it once,
// through the real API server, and pass against a real PostgreSQL; once the
// reuse period is over, 200 more cost one more read, in the background.
func TestProbesOfOneSecretCostOneRead(t *testing.T) {
	const targets = 200
	ns := namespace(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: "10.244.62.1", MaxConnections: targets + 20})
	credentials(t, ns, "shared", pg)
	gets := &secretGets{}
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.QPS, cfg.Burst = 20, 50 // the agent's defaults
	cfg.Wrap(gets.wrap)
	reader, err := client.New(cfg, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	factory := publisher.NewProbers(reader, ttl)
	probe := postgresProbe("SELECT 1", "shared")
	probers := make([]probes.Prober, targets)
	for i := range probers {
		probers[i] = factory.Build(ns, &probe)
	}
	round := func() {
		t.Helper()
		start := make(chan struct{})
		results := make(chan probes.Result, targets)
		var wg sync.WaitGroup
		for _, pr := range probers {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				<-start
				results <- pr.Probe(ctx, probes.Target{Host: "10.244.62.1", Port: 5432})
			})
		}
		close(start)
		wg.Wait()
		close(results)
		failures := map[string]int{}
		for r := range results {
			if r.Status != probes.Success {
				failures[fmt.Sprintf("%s: %s", r.Reason, r.Message)]++
			}
		}
		if len(failures) > 0 {
			t.Errorf("probes failed: %v", failures)
		}
	}
	round()
	if n := gets.count.Load(); n != 1 {
		t.Errorf("%d probes of one Secret at once made %d GETs, want 1", targets, n)
	}
	time.Sleep(ttl)
	round()
	time.Sleep(500 * time.Millisecond) // the background refresh
	if n := gets.count.Load(); n != 2 {
		t.Errorf("two rounds of %d probes, one reuse period apart, made %d GETs, want 2", targets, n)
	}
}

// TestSecretTLSModeIsHonoured: a Secret ported from the original product
// keeps tlsMode; without one in the spec, the probe uses it. A spec that
// sets one wins, and the conflict is reported once; an invalid value fails
// the probe, naming the key.
func TestSecretTLSModeIsHonoured(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	ca, err := harness.NewCA("db-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA("not-the-db-ca")
	if err != nil {
		t.Fatal(err)
	}
	const ip = "10.244.63.1"
	cert, err := ca.Issue(ip)
	if err != nil {
		t.Fatal(err)
	}
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip, TLS: cert})
	dbPod(t, ns, "db-0", nodeA, ip)
	o := pg.Options()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ported"},
		Data: map[string][]byte{"user": []byte(o.User), "password": []byte(o.Password), "tlsMode": []byte("verify-full"), "caCert": other.PEM}}
	if err := controlPlane.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	port := []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}
	create := func(name string, mode swhv1alpha1.PostgreSQLTLSMode) {
		t.Helper()
		probe := postgresProbe("SELECT 1", "ported")
		probe.PostgreSQL.TLSMode = mode
		swh := resource(ns, name, port, probe)
		swh.Spec.Selector = map[string]string{"app": "db"}
		if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
			t.Fatal(err)
		}
	}
	create("from-secret", "")
	create("pinned", swhv1alpha1.PostgreSQLTLSDisable)

	// verify-full against a CA that did not sign the server: no TLS would pass.
	waitPublished(t, ns, "from-secret", map[string]string{"from-secret-node-a": "db-0:FFF"})
	waitPublished(t, ns, "pinned", map[string]string{"pinned-node-a": "db-0:TTF"})
	harness.Eventually(t, 10*time.Second, "PostgreSQL probes failing with reason tls", func() error {
		if n := a.metric(t, "swh_agent_probe_results_total", map[string]string{"mode": "PostgreSQL", "reason": "tls"}); n == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})

	waitConflict(t, ns, "pinned", `sets tlsMode "disable" and Secret `+ns+`/ported holds tlsMode "verify-full"`)
	// Reconciles that change nothing report nothing again.
	for i := range 3 {
		pod := &corev1.Pod{}
		if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "db-0"}, pod); err != nil {
			t.Fatal(err)
		}
		pod.Annotations = map[string]string{"touch": fmt.Sprint(i)}
		if err := controlPlane.Client.Update(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	if events := conflicts(t, ns, "pinned"); len(events) != 1 || events[0].Series != nil {
		t.Errorf("one conflict reported %d times: %v", len(events), events)
	}

	// The right CA: the Secret's verify-full passes.
	secret.Data["caCert"] = ca.PEM
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "from-secret", map[string]string{"from-secret-node-a": "db-0:TTF"})

	// A new conflict is a new report, not folded into the first one.
	secret.Data["tlsMode"] = []byte("require")
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitConflict(t, ns, "pinned", `Secret `+ns+`/ported holds tlsMode "require"`)
	if got := conflicts(t, ns, "pinned"); len(got) != 2 || got[0].Series != nil || got[1].Series != nil {
		t.Errorf("want the two conflicts as two events reported once each, got %v", got)
	}

	secret.Data["tlsMode"] = []byte("prefer")
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "from-secret", map[string]string{"from-secret-node-a": "db-0:FFF"})
	waitPublished(t, ns, "pinned", map[string]string{"pinned-node-a": "db-0:FFF"})
	waitProbeFailure(t, ns, "from-secret", `Secret `+ns+`/ported: key "tlsMode" is "prefer"`)
}

// conflicts lists the TLSModeConflict events of a resource.
func conflicts(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := controlPlane.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == "TLSModeConflict" {
			out = append(out, e)
		}
	}
	return out
}

// waitConflict waits for a TLSModeConflict event of the resource whose note
// contains note.
func waitConflict(t *testing.T, ns, name, note string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	harness.Eventually(t, 20*time.Second, "a TLSModeConflict event of "+name, func() error {
		var notes []string
		for _, e := range conflicts(t, ns, name) {
			if strings.Contains(e.Note, note) {
				found = e
				return nil
			}
			notes = append(notes, e.Note)
		}
		return fmt.Errorf("none says %q; notes: %q", note, notes)
	})
	return found
}

// waitProbeFailure waits until an event of the resource mentions what.
func waitProbeFailure(t *testing.T, ns, name, what string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("an event of %s saying %q", name, what), func() error {
		list := &eventsv1.EventList{}
		if err := controlPlane.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name != name {
				continue
			}
			if strings.Contains(e.Note, what) {
				return nil
			}
			notes = append(notes, e.Note)
		}
		return fmt.Errorf("notes: %q", notes)
	})
}
