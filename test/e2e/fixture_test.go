package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
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

// convergeTimeout bounds every wait for the data path to follow a change.
const convergeTimeout = 60 * time.Second

// fixture is one scenario's Kubernetes namespace and the pods, backends and
// namespaces it made; everything goes when the test ends.
type fixture struct {
	t        *testing.T
	ctx      context.Context
	ns       string
	scenario string
}

func newFixture(t *testing.T, scenario string) *fixture {
	t.Helper()
	if cluster == nil {
		t.Fatal("no cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &fixture{t: t, ctx: ctx, ns: cluster.CP.CleanNamespace(t), scenario: scenario}
}

func (f *fixture) c() client.Client { return cluster.CP.Client }

// pod creates a pod namespace on node and the matching Pod object with
// label app and named container ports.
func (f *fixture) pod(node *Node, name, app string, ports map[string]int32) *Pod {
	f.t.Helper()
	p, err := node.AddPod(name)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		if err := p.NS.Close(); err != nil {
			f.t.Error(err)
		}
	})
	var cports []corev1.ContainerPort
	for pname, port := range ports {
		cports = append(cports, corev1.ContainerPort{Name: pname, ContainerPort: port})
	}
	if _, err := harness.CreatePod(f.ctx, f.c(), harness.PodOptions{
		Namespace: f.ns, Name: name, Node: node.Name, Labels: map[string]string{"app": app},
		IPs: []string{p.IP}, Ports: cports,
	}); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// http starts an HTTP backend on the pod, healthy unless failed.
func (f *fixture) http(p *Pod, port int, failed bool) *HTTPBackend {
	f.t.Helper()
	b, err := p.StartHTTP(port)
	if err != nil {
		f.t.Fatal(err)
	}
	b.SetFailed(failed)
	f.t.Cleanup(func() { _ = b.Close() })
	return b
}

// banner starts an SMTP-like banner backend on the pod.
func (f *fixture) banner(p *Pod, port int) *BannerBackend {
	f.t.Helper()
	b, err := p.StartBanner(port)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = b.Close() })
	return b
}

// httpProbe checks GET /healthz on port every second; two failures take a
// pod out, one success brings it back.
func httpProbe(port intstr.IntOrString) swhv1alpha1.Probe {
	return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeHTTP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 2,
		HTTP: &swhv1alpha1.HTTPProbe{TargetPort: port, Path: "/healthz", Method: "GET", Scheme: swhv1alpha1.HTTPSchemeHTTP}}
}

func tcpProbe(port intstr.IntOrString) swhv1alpha1.Probe {
	return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeTCP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 2,
		TCP: &swhv1alpha1.TCPProbe{TargetPort: port}}
}

func postgresProbe(query, secret string) swhv1alpha1.Probe {
	return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModePostgreSQL, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: 2,
		PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromString("postgres"), DBName: "postgres", Query: query,
			AuthSecretName: secret, TLSMode: swhv1alpha1.PostgreSQLTLSDisable}}
}

// swh creates a resource selecting app=app and returns its Service's
// cluster IP once the controller has made the Service.
func (f *fixture) swh(name, app string, mutate func(*swhv1alpha1.ServiceWithHealthchecks), ports []swhv1alpha1.ServicePort, probes ...swhv1alpha1.Probe) *corev1.Service {
	f.t.Helper()
	r := &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:       ports,
			Selector:    map[string]string{"app": app},
			Healthcheck: &swhv1alpha1.Healthcheck{PeriodSeconds: 1, Probes: probes},
		},
	}
	if mutate != nil {
		mutate(r)
	}
	if err := f.c().Create(f.ctx, r); err != nil {
		f.t.Fatalf("creating %s: %v", name, err)
	}
	svc := f.service(name, func(s *corev1.Service) bool { return s.Spec.ClusterIP != "" && s.Spec.Selector == nil })
	f.programmed(svc)
	return svc
}

// programmed waits until every node's kube-proxy has rules for svc's
// cluster IP, so no request reaches it untranslated (see WaitProgrammed).
func (f *fixture) programmed(svc *corev1.Service) {
	f.t.Helper()
	if err := cluster.WaitProgrammed(f.ctx, svc.Spec.ClusterIP); err != nil {
		f.t.Fatal(err)
	}
}

// service waits until the Service exists and ok holds for it.
func (f *fixture) service(name string, ok func(*corev1.Service) bool) *corev1.Service {
	f.t.Helper()
	svc := &corev1.Service{}
	harness.Eventually(f.t, convergeTimeout, "Service "+name+" as expected", func() error {
		svc = &corev1.Service{}
		err := f.c().Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: name}, svc)
		if err == nil && ok(svc) {
			return nil
		}
		return fmt.Errorf("%v %+v", err, svc.Spec)
	})
	return svc
}

func hostPort(ip string, port int32) string { return net.JoinHostPort(ip, strconv.Itoa(int(port))) }

// Expect is what requests must do once the data path has followed a
// change: land only on Want (every one of them, nothing failing), or, with
// Want empty, reach nothing at all.
type Expect struct {
	Step string
	Req  Request
	// N is how many requests are measured once converged.
	N    int
	Want []string
}

func (e Expect) holds(t Tally) bool {
	if len(e.Want) == 0 {
		return t.Total > 0 && t.Failed == t.Total
	}
	return t.LandsOnly(e.Want...)
}

func (e Expect) describe() string {
	if len(e.Want) == 0 {
		return "reach nothing"
	}
	return fmt.Sprintf("land only on %v", e.Want)
}

// result is one Expect's outcome.
type result struct {
	row Row
	err error
}

// await sends batches of requests until one meets e, then measures e.N more
// that must meet it too. The row holds the time since the change (when the
// first batch met e) and the requests sent while converging. Two batches in
// a row must meet e before the measurement starts: one clean batch does not
// prove the data path settled.
func (f *fixture) await(since time.Time, e Expect) result {
	var during Tally
	deadline := time.Now().Add(convergeTimeout)
	batch := 20
	if len(e.Want) == 0 {
		batch = 4 // requests to nothing time out
	}
	var converged time.Duration
	for held := 0; held < 2; {
		b := Send(f.ctx, e.Req, batch)
		if e.holds(b) {
			if held++; held == 1 {
				converged = time.Since(since)
			}
			continue
		}
		held = 0
		during.Merge(b)
		if time.Now().After(deadline) || f.ctx.Err() != nil {
			return result{err: fmt.Errorf("%s: requests never %s; last batch: %s", e.Step, e.describe(), b)}
		}
		time.Sleep(100 * time.Millisecond)
	}
	row := Row{Scenario: f.scenario, Step: e.Step, Converge: converged, During: during}
	row.Measured = Send(f.ctx, e.Req, e.N)
	if !e.holds(row.Measured) {
		return result{row: row, err: fmt.Errorf("%s: want every request to %s, got %s\n%s", e.Step, e.describe(), row.Measured, cluster.Diagnose())}
	}
	return result{row: row}
}

// converge awaits every expectation at once, each timed on its own from
// since, records them and fails the test if any does not hold.
func (f *fixture) converge(since time.Time, exps ...Expect) {
	f.t.Helper()
	results := make([]result, len(exps))
	var wg sync.WaitGroup
	for i, e := range exps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = f.await(since, e)
		}()
	}
	wg.Wait()
	failed := false
	for _, r := range results {
		if r.row.Step != "" {
			report.Add(r.row)
			f.t.Logf("%s: converged in %s (while converging: %s); measured %s", r.row.Step,
				r.row.Converge.Round(10*time.Millisecond), r.row.During, r.row.Measured)
		}
		if r.err != nil {
			f.t.Error(r.err)
			failed = true
		}
	}
	if failed {
		f.t.FailNow()
	}
}

// loopResult records a continuous client loop and checks it saw no failure
// and reached every pod of want.
func (f *fixture) loopResult(step string, converge time.Duration, t Tally, want ...string) {
	f.t.Helper()
	report.Add(Row{Scenario: f.scenario, Step: step, Measured: t, Converge: converge})
	f.t.Logf("%s: %s (converged in %s)", step, t, converge.Round(10*time.Millisecond))
	if !t.LandsOnly(want...) {
		f.t.Errorf("%s: want zero failed requests, all landing on %v; got %s", step, want, t)
	}
}

// proxyHealth is what kube-proxy's healthCheckNodePort server answers.
type proxyHealth struct {
	Code           int
	LocalEndpoints int `json:"localEndpoints"`
}

func (f *fixture) healthCheck(node *Node, port int32) (proxyHealth, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: cluster.External.DialContext, DisableKeepAlives: true}}
	resp, err := client.Get("http://" + hostPort(node.IP, port) + "/")
	if err != nil {
		return proxyHealth{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return proxyHealth{}, err
	}
	h := proxyHealth{Code: resp.StatusCode}
	if err := json.Unmarshal(body, &h); err != nil {
		return h, fmt.Errorf("decoding %q: %w", body, err)
	}
	return h, nil
}

// waitHealthChecks polls the healthCheckNodePort of every node in want
// until each answers 200 with localEndpoints equal to its count, or 503 with
// 0 for a count of 0. Each node is timed on its own from since.
func (f *fixture) waitHealthChecks(step string, since time.Time, port int32, want map[*Node]int) {
	f.t.Helper()
	done := map[*Node]bool{}
	last := map[string]string{}
	harness.Eventually(f.t, convergeTimeout, step+": healthCheckNodePort", func() error {
		for node, count := range want {
			if done[node] {
				continue
			}
			code := http.StatusOK
			if count == 0 {
				code = http.StatusServiceUnavailable
			}
			h, err := f.healthCheck(node, port)
			if err == nil && h.Code == code && h.LocalEndpoints == count {
				done[node] = true
				report.Add(Row{Scenario: f.scenario, Step: fmt.Sprintf("%s: %s healthCheckNodePort %d, localEndpoints %d", step, node.Name, code, count), Converge: time.Since(since)})
				continue
			}
			last[node.Name] = fmt.Sprintf("want %d with localEndpoints %d, got %+v (%v)", code, count, h, err)
		}
		if len(done) < len(want) {
			return fmt.Errorf("%v", last)
		}
		return nil
	})
}

// slices lists the EndpointSlices of a Service.
func (f *fixture) slices(service string) []discoveryv1.EndpointSlice {
	f.t.Helper()
	list := &discoveryv1.EndpointSliceList{}
	if err := f.c().List(f.ctx, list, client.InNamespace(f.ns), client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

// waitSlices polls until ok holds for the Service's slices and returns how
// long it took since since.
func (f *fixture) waitSlices(what, service string, since time.Time, ok func([]discoveryv1.EndpointSlice) bool) time.Duration {
	f.t.Helper()
	var took time.Duration
	harness.Eventually(f.t, convergeTimeout, what+": slices of "+service+" as expected", func() error {
		s := f.slices(service)
		if ok(s) {
			took = time.Since(since)
			return nil
		}
		var names []string
		for _, sl := range s {
			names = append(names, sl.Name+"("+sl.Labels[discoveryv1.LabelManagedBy]+")")
		}
		return fmt.Errorf("now %v", names)
	})
	return took
}

// ex builds an Expect.
func ex(step string, req Request, n int, want ...string) Expect {
	return Expect{Step: step, Req: req, N: n, Want: want}
}
