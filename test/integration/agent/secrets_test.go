package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	agentapp "github.com/swh-dev/swh/agent/app"
	"github.com/swh-dev/swh/agent/publisher"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// secretGets sits in a client's transport: it counts the GETs of Secrets
// and, while failing is set, answers them 500 without asking the API
// server. Nothing else is touched.
type secretGets struct {
	// only, when set, is the one Secret path counted: another test's
	// resources left behind must not count.
	only    string
	count   atomic.Int64
	failing atomic.Bool
	mu      sync.Mutex
	at      []time.Time
}

// times returns when each GET was made.
func (s *secretGets) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

func (s *secretGets) wrap(next http.RoundTripper) http.RoundTripper {
	secretPath := regexp.MustCompile(`^/api/v1/namespaces/[^/]+/secrets/[^/]+$`)
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet || !secretPath.MatchString(req.URL.Path) || (s.only != "" && req.URL.Path != s.only) {
			return next.RoundTrip(req)
		}
		s.count.Add(1)
		s.mu.Lock()
		s.at = append(s.at, time.Now())
		s.mu.Unlock()
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
// through wrap and a Secret reuse period of secretTTL (0: the agent's
// default, 30 s).
func startAgentThrough(t *testing.T, node string, secretTTL time.Duration, wrap func(http.RoundTripper) http.RoundTripper) *agent {
	t.Helper()
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.Wrap(wrap)
	a := &agent{node: node, registry: prometheus.NewRegistry()}
	mgr, err := agentapp.NewManager(cfg, agentapp.Options{
		NodeName: node, MetricsAddr: "0", HealthAddr: "0", Registry: a.registry,
		Publisher: publisher.Options{SkipNameValidation: true, SecretTTL: secretTTL},
	})
	if err != nil {
		t.Fatalf("creating the agent of %s: %v", node, err)
	}
	a.stop = harness.StartManager(context.Background(), t, "the agent of "+node, mgr)
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

// gatedDatabase starts PostgreSQL on a pod address, a pod db-0 of node A for it, its
// credentials Secret and a resource name gated by a PostgreSQL probe, and
// waits until the pod is published ready. The probe runs every 2 s and
// allows 2 s (the API caps timeoutSeconds at periodSeconds) and three
// failures: these tests are about the Secret path, and a slow backend fork
// of a loaded machine must not fail them.
func gatedDatabase(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	want := newGatedDatabase(t, ns, name)
	waitPublished(t, ns, name, want)
	return want
}

// newGatedDatabase is gatedDatabase without the wait; it returns the
// slices of the pod published ready.
func newGatedDatabase(t *testing.T, ns, name string) map[string]string {
	t.Helper()
	ip := harness.PodIP(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	dbPod(t, ns, "db-0", nodeA, ip)
	credentials(t, ns, name+"-credentials", pg)
	probe := postgresProbe("SELECT 1", name+"-credentials")
	probe.TimeoutSeconds, probe.FailureThreshold = 2, 3
	swh := resource(ns, name, []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}, probe)
	swh.Spec.Selector = map[string]string{"app": "db"}
	swh.Spec.Healthcheck.PeriodSeconds = 2
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	return map[string]string{name + "-node-a": "db-0:TTF"}
}

// TestSecretReadErrorsKeepPostgreSQLEndpoints: once the credentials are
// known, Secret reads answered 500 for six reuse periods (three probe
// periods) change nothing: the probes keep the last credentials read and
// keep passing (no failure for the Secret: three in a row would withdraw
// the pod), the reads go on at most once per period.
func TestSecretReadErrorsKeepPostgreSQLEndpoints(t *testing.T) {
	gets := &secretGets{}
	a := startAgentThrough(t, nodeA, time.Second, gets.wrap)
	ns := namespace(t)
	want := gatedDatabase(t, ns, "blip")

	w := watchSteady(ns, "blip", want)
	before := gets.count.Load()
	gets.failing.Store(true)
	time.Sleep(6 * time.Second) // six reuse periods of the test agents
	failed := gets.count.Load() - before
	gets.failing.Store(false)
	time.Sleep(2 * time.Second)
	w.check(t, "while Secret reads failed")

	// A read is due once a period has passed since the last one began; the
	// probes (every 2 s) find it due each time.
	if failed < 2 || failed > 6 {
		t.Errorf("%d Secret reads in 6 s of failures with a 1 s reuse period, want 2 to 6", failed)
	}
	if n := a.metric(t, "swh_agent_secret_reads_total", map[string]string{"outcome": "error"}); n < 2 {
		t.Errorf("swh_agent_secret_reads_total{outcome=\"error\"} = %v, want the failed reads", n)
	}
	if n := a.metric(t, "swh_agent_probe_results_total", map[string]string{"mode": "PostgreSQL", "status": "failure", "reason": "secret"}); n != 0 {
		t.Errorf("%v PostgreSQL probes failed for the Secret while it could not be read", n)
	}
}

// TestFirstSecretReadRetriedSoon: an agent (with the default 30 s reuse
// period) that starts while Secret reads fail, as during an API server
// blip, reads the Secret again on a short backoff: the PostgreSQL-gated
// endpoint is ready within seconds of the blip's end, not 30.
func TestFirstSecretReadRetriedSoon(t *testing.T) {
	gets := &secretGets{}
	gets.failing.Store(true)
	startAgentThrough(t, nodeA, 0, gets.wrap)
	ns := namespace(t)
	want := newGatedDatabase(t, ns, "blip-start")
	harness.Eventually(t, 20*time.Second, "a Secret read answered 500", func() error {
		if gets.count.Load() == 0 {
			return fmt.Errorf("no Secret read yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	gets.failing.Store(false)
	healed := time.Now()
	// The backoff is at most 2 s by now (1 s, then 2 s): with probes every
	// 2 s, the pod is ready 2 to 4 s after the blip; 10 s tells that from
	// the 30 s reuse period.
	harness.Eventually(t, 10*time.Second, "ready after Secret reads stopped failing", func() error {
		got, _, err := published(context.Background(), ns, "blip-start")
		if err == nil && fmt.Sprint(got) == fmt.Sprint(want) {
			return nil
		}
		return fmt.Errorf("the slices are %v (%v), want %v (%d Secret reads)", got, err, want, gets.count.Load())
	})
	t.Logf("ready %v after Secret reads stopped failing (%d reads)", time.Since(healed).Round(10*time.Millisecond), gets.count.Load())
}

// TestAPIServerPauseKeepsPostgreSQLEndpoints freezes the API server for
// four reuse periods, longer than the probe's 2 s timeout (a probe that
// waited for a Secret read would fail): PostgreSQL-gated endpoints are not
// withdrawn, during the pause or after, and no probe fails for the Secret.
func TestAPIServerPauseKeepsPostgreSQLEndpoints(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	want := gatedDatabase(t, ns, "frozen")

	w := watchSteady(ns, "frozen", want)
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
	w.check(t, "across the pause")
	if n := a.metric(t, "swh_agent_probe_results_total", map[string]string{"mode": "PostgreSQL", "status": "failure", "reason": "secret"}); n != 0 {
		t.Errorf("%v PostgreSQL probes failed for the Secret while the API server was paused", n)
	}
}

// TestProbesOfOneSecretCostOneRead: the agent probes 200 pods of one
// resource with one Secret's credentials, all at once (a resource's
// targets share a phase), against a real PostgreSQL: the first round reads
// the Secret once, through the real API server; later, one more read per
// reuse period, however many probes run.
func TestProbesOfOneSecretCostOneRead(t *testing.T) {
	const (
		pods = 200
		ttl  = 3 * time.Second
	)
	ns := namespace(t)
	gets := &secretGets{only: "/api/v1/namespaces/" + ns + "/secrets/shared"}
	startAgentThrough(t, nodeA, ttl, gets.wrap)
	ip := harness.PodIP(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip, MaxConnections: pods + 20})
	credentials(t, ns, "shared", pg)
	// One address for every pod: the probes all reach the one server.
	want := make([]string, pods)
	for i := range pods {
		name := fmt.Sprintf("db-%03d", i)
		dbPod(t, ns, name, nodeA, ip)
		want[i] = name + ":TTF"
	}
	swh := resource(ns, "shared", []swhv1alpha1.ServicePort{{Port: 5432, TargetPort: intstr.FromString("postgres")}}, postgresProbe("SELECT 1", "shared"))
	swh.Spec.Selector = map[string]string{"app": "db"}
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "shared", map[string]string{"shared-node-a": strings.Join(want, ",")})
	first := gets.times()
	if len(first) == 0 {
		t.Fatal("the probes passed without reading the Secret")
	}
	if len(first) > 1 && first[1].Sub(first[0]) < ttl/2 {
		t.Errorf("%d probes of one Secret at once read it %d times within %s: %v", pods, len(first), ttl/2, first)
	}
	time.Sleep(3 * ttl)
	all := gets.times()
	observed := time.Since(all[0])
	if max := 2 + int(observed/ttl); len(all) < 2 || len(all) > max {
		t.Errorf("%d probes a second for %s read the Secret %d times, want 2 to %d (one per %s reuse period)", pods, observed.Round(time.Second), len(all), max, ttl)
	}
	for i := 1; i < len(all); i++ {
		if gap := all[i].Sub(all[i-1]); gap < ttl/2 {
			t.Errorf("reads %d and %d of the Secret %s apart, within its reuse period of %s", i-1, i, gap, ttl)
		}
	}
}
