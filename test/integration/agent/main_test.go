// Package agent_test runs swh-agent for real: two agents for two simulated
// nodes and the controller against a real kube-apiserver, probing real
// servers on pod addresses inside the test network namespace, and checks the
// EndpointSlices they publish.
package agent_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentapp "github.com/swh-dev/swh/agent/app"
	"github.com/swh-dev/swh/agent/publisher"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	controllerapp "github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

var controlPlane *harness.ControlPlane

const (
	nodeA = "node-a"
	nodeB = "node-b"
)

func TestMain(m *testing.M) {
	os.Exit(harness.RunSuite(m, harness.SuiteOptions{
		Name: "agent", NeedsSandbox: true, Setup: setup,
		// Room for the reaction benchmark's thousand resources: envtest's
		// default range is a /24, 253 ClusterIPs.
		ControlPlane: harness.ControlPlaneOptions{ExtraAPIServerFlags: map[string]string{"service-cluster-ip-range": "10.96.0.0/16"}},
	}))
}

// setup creates the two nodes and starts one controller for the whole
// suite: it only keeps the child Services.
func setup(ctx context.Context, cp *harness.ControlPlane) (func(), error) {
	controlPlane = cp
	for node, zone := range map[string]string{nodeA: "zone-a", nodeB: "zone-b"} {
		if _, err := harness.CreateNode(ctx, cp.Client, harness.NodeOptions{Name: node, Zone: zone}); err != nil {
			return nil, err
		}
	}
	// swh-controller's default client limits (--kube-api-qps 50,
	// --kube-api-burst 100), not client-go's 5: the benchmarks create
	// resources by the thousand.
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 50, 100
	mgr, err := controllerapp.NewManager(cfg, controllerapp.Options{MetricsAddr: "0", HealthAddr: "0", Registry: prometheus.NewRegistry()})
	if err != nil {
		return nil, err
	}
	stop := harness.RunManager(context.Background(), mgr)
	return func() {
		if err := stop(); err != nil {
			fmt.Printf("the suite's controller returned: %v\n", err)
		}
	}, nil
}

// agent is one running swh-agent.
type agent struct {
	node     string
	registry *prometheus.Registry
	stop     func()
}

// startAgent runs an agent for node until it is stopped or the test ends.
func startAgent(t testing.TB, node string) *agent {
	t.Helper()
	return startAgentWith(t, node, nil)
}

// startAgentWith is startAgent with the agent's options changed by tune.
func startAgentWith(t testing.TB, node string, tune func(*agentapp.Options)) *agent {
	t.Helper()
	a := &agent{node: node, registry: prometheus.NewRegistry()}
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.QPS, cfg.Burst = 20, 50 // swh-agent's defaults
	// SWH_AGENT_COALESCE sets the agent's --coalesce, for the benchmarks
	// (make bench-agent SWH_AGENT_COALESCE=10ms): the reaction's trade-off.
	var coalesce time.Duration
	if v := os.Getenv("SWH_AGENT_COALESCE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SWH_AGENT_COALESCE=%q: want a duration such as 10ms", v)
		}
		coalesce = d
	}
	opts := agentapp.Options{
		NodeName: node, MetricsAddr: "0", HealthAddr: "0", Registry: a.registry,
		Publisher: publisher.Options{SkipNameValidation: true, SecretTTL: time.Second, Coalesce: coalesce},
	}
	if tune != nil {
		tune(&opts)
	}
	mgr, err := agentapp.NewManager(cfg, opts)
	if err != nil {
		t.Fatalf("creating the agent of %s: %v", node, err)
	}
	a.stop = harness.StartManager(context.Background(), t, "the agent of "+node, mgr)
	return a
}

// Stop stops the agent and waits for it; the test's end does too.
func (a *agent) Stop() { a.stop() }

// namespace creates a namespace whose resources go when the test ends.
func namespace(t testing.TB) string { return controlPlane.CleanNamespace(t) }

// fastProbe returns a probe of mode on port that decides after one result.
func fastProbe(mode swhv1alpha1.ProbeMode, port intstr.IntOrString) swhv1alpha1.Probe {
	p := swhv1alpha1.Probe{Mode: mode, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
	switch mode {
	case swhv1alpha1.ProbeModeTCP:
		p.TCP = &swhv1alpha1.TCPProbe{TargetPort: port}
	case swhv1alpha1.ProbeModeHTTP:
		p.HTTP = &swhv1alpha1.HTTPProbe{TargetPort: port, Path: "/", Method: "GET", Scheme: swhv1alpha1.HTTPSchemeHTTP, ExpectedStatusCodes: []string{"200-399"}}
	}
	return p
}

// resource returns a resource selecting app=name with a 1 s period.
func resource(ns, name string, ports []swhv1alpha1.ServicePort, probes ...swhv1alpha1.Probe) *swhv1alpha1.ServiceWithHealthchecks {
	return &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:       append([]swhv1alpha1.ServicePort(nil), ports...), // callers share port lists
			Selector:    map[string]string{"app": name},
			Healthcheck: &swhv1alpha1.Healthcheck{PeriodSeconds: 1, InitialDelaySeconds: 0, Probes: probes},
		},
	}
}

// published describes the slices of a resource: per slice name, the sorted
// "pod:ready/serving/terminating" of its endpoints.
func published(ctx context.Context, ns, name string) (map[string]string, []discoveryv1.EndpointSlice, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	for _, s := range list.Items {
		var eps []string
		for _, ep := range s.Endpoints {
			eps = append(eps, fmt.Sprintf("%s:%s", ep.TargetRef.Name, conditions(ep.Conditions)))
		}
		sort.Strings(eps)
		out[s.Name] = strings.Join(eps, ",")
	}
	return out, list.Items, nil
}

func conditions(c discoveryv1.EndpointConditions) string {
	b := func(p *bool, def bool) string {
		if (p == nil && def) || (p != nil && *p) {
			return "T"
		}
		return "F"
	}
	return b(c.Ready, true) + b(c.Serving, true) + b(c.Terminating, false)
}

// waitPublished waits until the resource's slices are exactly want.
func waitPublished(t *testing.T, ns, name string, want map[string]string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, "slices of "+name, func() error {
		got, _, err := published(context.Background(), ns, name)
		if err != nil {
			return err
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("\n got %v\nwant %v", got, want)
		}
		return nil
	})
}
