// Package controller_test runs swh-controller against a real kube-apiserver:
// the child Service, adoption, slice hygiene, status and leader election.
// No kube-controller-manager runs here, so the garbage collector and the
// built-in EndpointSlice controller are absent: tests write what they would.
package controller_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// controlPlane is shared by the package's tests; each works in its own
// namespace and starts its own controller.
var controlPlane *harness.ControlPlane

// apiServerFlags are the kube-apiserver flags of the suite's control plane,
// and of those the scale benchmark starts. Dual-stack, so dual-stack
// resources get both families; a /16 holds the benchmark's 10,000
// single-stack Services (the /112 would hold as many of the other family).
// OwnerReferencesPermissionEnforcement (on by default in OpenShift) makes
// owner references need RBAC of their own.
var apiServerFlags = map[string]string{
	"service-cluster-ip-range": "10.96.0.0/16,fd00:10:96::/112",
	"enable-admission-plugins": "OwnerReferencesPermissionEnforcement",
}

func TestMain(m *testing.M) {
	os.Exit(harness.RunSuite(m, harness.SuiteOptions{
		Name:         "controller",
		ControlPlane: harness.ControlPlaneOptions{ExtraAPIServerFlags: apiServerFlags},
		Setup: func(_ context.Context, cp *harness.ControlPlane) (func(), error) {
			controlPlane = cp
			return nil, nil
		},
	}))
}

// controller is one running swh-controller with its own metrics registry.
type controller struct {
	registry *prometheus.Registry
	// cache is the manager's cache: what the controller holds in memory.
	cache client.Reader
	stop  func()
}

// startController runs a controller as the cluster administrator until the
// test ends.
func startController(t *testing.T, opts app.Options) *controller {
	t.Helper()
	return startControllerAs(t, controlPlane.Config, opts)
}

// startControllerAs runs a controller with cfg's credentials until the test ends.
func startControllerAs(t *testing.T, cfg *rest.Config, opts app.Options) *controller {
	t.Helper()
	c := &controller{registry: prometheus.NewRegistry()}
	opts.Registry = c.registry
	opts.SkipNameValidation = true
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	if opts.HealthAddr == "" {
		opts.HealthAddr = "0"
	}
	mgr, err := app.NewManager(cfg, opts)
	if err != nil {
		t.Fatalf("creating the controller: %v", err)
	}
	c.cache = mgr.GetCache()
	c.stop = harness.StartManager(context.Background(), t, "the controller", mgr)
	return c
}

// Stop stops the controller and waits for it; the test's end does too.
func (c *controller) Stop() { c.stop() }

// counter returns the value of a counter, summed over its labels matching want.
func (c *controller) counter(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	var gatherer prometheus.Gatherer = c.registry
	if strings.HasPrefix(name, "controller_runtime_") {
		gatherer = ctrlmetrics.Registry // controller-runtime's own metrics are process-wide
	}
	families, err := gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsMatch(m, want) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// histogramCount returns how many observations a histogram (with no
// labels) has.
func (c *controller) histogramCount(t *testing.T, name string) uint64 {
	t.Helper()
	families, err := c.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == k && l.GetValue() == v)
		}
		if !found {
			return false
		}
	}
	return true
}

// namespace creates a namespace whose resources go when the test ends.
func namespace(t testing.TB) string { return controlPlane.CleanNamespace(t) }

// newResource returns a resource with one HTTP port and a TCP probe.
func newResource(ns, name string) *swhv1alpha1.ServiceWithHealthchecks {
	return &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:    []swhv1alpha1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			Selector: map[string]string{"app": name},
			Healthcheck: &swhv1alpha1.Healthcheck{
				PeriodSeconds: 5, InitialDelaySeconds: 0,
				Probes: []swhv1alpha1.Probe{{Mode: swhv1alpha1.ProbeModeTCP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
					TCP: &swhv1alpha1.TCPProbe{TargetPort: intstr.FromInt32(8080)}}},
			},
		},
	}
}

func getService(ctx context.Context, ns, name string) (*corev1.Service, error) {
	svc := &corev1.Service{}
	err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc)
	return svc, err
}

// updateResource changes a resource the way a user would, retrying when the
// controller wrote its status in between (the update would conflict).
func updateResource(t *testing.T, ctx context.Context, ns, name string, mutate func(*swhv1alpha1.ServiceWithHealthchecks)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := getResource(t, ctx, ns, name)
		mutate(got)
		return controlPlane.Client.Update(ctx, got)
	})
	if err != nil {
		t.Fatalf("updating %s: %v", name, err)
	}
}

func getResource(t *testing.T, ctx context.Context, ns, name string) *swhv1alpha1.ServiceWithHealthchecks {
	t.Helper()
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swh); err != nil {
		t.Fatal(err)
	}
	return swh
}

// agentSlice returns a slice as an agent would publish it for one port on one node.
func agentSlice(ns, service, port, node string, family discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("%s-%s-%s", service, port, node)
	if family == discoveryv1.AddressTypeIPv6 {
		name += "-v6"
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: service,
			discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
			endpoints.DefaultNodeLabel:   endpoints.NodeLabelValue(node),
		}},
		AddressType: family,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: new(port), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
	}
}

// endpoint returns an endpoint of pod with the given readiness.
func endpoint(pod, uid, addr, node string, ready bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: new(ready), Serving: new(ready), Terminating: new(false)},
		NodeName:   new(node),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID(uid)},
	}
}
