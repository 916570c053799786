package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// editor is the field manager of `kubectl edit`: someone else's hand on the
// child Service.
const editor = "kubectl-edit"

// editService changes the child Service as `kubectl edit` would.
func editService(t *testing.T, ctx context.Context, ns, name string, mutate func(*corev1.Service)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := getService(ctx, ns, name)
		if err != nil {
			return err
		}
		mutate(svc)
		return controlPlane.Client.Update(ctx, svc, client.FieldOwner(editor))
	})
	if err != nil {
		t.Fatalf("editing Service %s: %v", name, err)
	}
}

// waitSynced waits until the resource's child Service exists and its
// ServiceSynced condition is True with reason Synced.
func waitSynced(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, name+" synced", func() error {
		if _, err := getService(ctx, ns, name); err != nil {
			return err
		}
		c, err := condition(t, ctx, ns, name)()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionTrue || c.Reason != swhv1alpha1.ReasonSynced || c.ObservedGeneration != getResource(t, ctx, ns, name).Generation {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

// eventNote returns the note of the newest event of that reason on the
// resource, or an error when there is none.
func eventNote(ctx context.Context, ns, name, reason string) (string, error) {
	list := &eventsv1.EventList{}
	if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	var newest *eventsv1.Event
	for i := range list.Items {
		e := &list.Items[i]
		if e.Regarding.Name == name && e.Reason == reason && (newest == nil || newest.EventTime.Before(&e.EventTime)) {
			newest = e
		}
	}
	if newest == nil {
		return "", fmt.Errorf("no event %s on %s among %d events", reason, name, len(list.Items))
	}
	return newest.Note, nil
}

// TestForeignSelectorIsRemoved: someone adds a selector to the child
// Service. The built-in EndpointSlice controller would then publish the pods
// by readiness next to the agents' slices (kube-proxy merges them), which
// bypasses the probes. The controller removes the selector, deletes the
// built-in controller's slices and Endpoints, keeps the agents' slices, and
// says so.
func TestForeignSelectorIsRemoved(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	node := "selector-" + ns
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	if err := controlPlane.Client.Create(ctx, newResource(ns, "web")); err != nil {
		t.Fatal(err)
	}
	ours := agentSlice(ns, "web", "http", node, discoveryv1.AddressTypeIPv4, endpoint("web-0", "uid-web-0", "10.244.8.1", node, true))
	if err := controlPlane.Client.Create(ctx, ours); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "web")

	// What the built-in controllers publish for a Service with a selector
	// (no kube-controller-manager runs here: the test writes it). The pod
	// web-1 is Ready, but fails its probes: the agent does not publish it.
	builtin := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-xk2p9", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web",
			discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.8.2"}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
	}
	//lint:ignore SA1019 what the built-in Endpoints controller writes
	eps := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
	}
	for _, o := range []client.Object{builtin, eps} {
		if err := controlPlane.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	edited := metav1.Now().Rfc3339Copy() // condition times have seconds
	editService(t, ctx, ns, "web", func(svc *corev1.Service) { svc.Spec.Selector = map[string]string{"app": "web"} })

	// The status goes through SelectorRemoved (the built-in controller's
	// slices are looked for again a few seconds later) and back to Synced.
	harness.Eventually(t, 20*time.Second, "selector removed, built-in slices deleted, status synced again", func() error {
		svc, err := getService(ctx, ns, "web")
		if err != nil {
			return err
		}
		if len(svc.Spec.Selector) > 0 {
			return fmt.Errorf("the child Service still has the selector %v", svc.Spec.Selector)
		}
		for _, o := range []client.Object{builtin, eps} {
			if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (%v)", o, o.GetName(), err)
			}
		}
		cond, err := condition(t, ctx, ns, "web")()
		if err != nil {
			return err
		}
		if cond.Status != metav1.ConditionTrue || cond.Reason != swhv1alpha1.ReasonSynced || cond.LastTransitionTime.Before(&edited) {
			return fmt.Errorf("condition %+v", cond)
		}
		return nil
	})
	if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(ours), &discoveryv1.EndpointSlice{}); err != nil {
		t.Errorf("the agent's slice went too: %v", err)
	}
	note, err := eventNote(ctx, ns, "web", swhv1alpha1.EventReasonServiceDriftReverted)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(note, "selector") || !strings.Contains(note, editor) {
		t.Errorf("event note %q does not say what was put back and who set it", note)
	}
	if n := c.counter(t, "swh_controller_service_reverts_total", map[string]string{"field": "selector"}); n != 1 {
		t.Errorf("swh_controller_service_reverts_total{field=selector} = %v, want 1", n)
	}
}

// TestServiceDriftIsPutBack changes, as someone else, one field of the child
// Service that changes traffic, and checks that the controller puts the
// spec's value (or the API server's default where the spec sets none) back.
func TestServiceDriftIsPutBack(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	tests := []struct {
		name  string
		spec  func(*swhv1alpha1.ServiceWithHealthchecksSpec)
		edit  func(*corev1.Service)
		check func(*corev1.ServiceSpec) error
	}{
		{"a port the spec does not have", nil, func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "debug", Port: 9090, TargetPort: intstr.FromInt32(9090)})
		}, func(s *corev1.ServiceSpec) error {
			if len(s.Ports) != 1 || s.Ports[0].Name != "http" {
				return fmt.Errorf("ports %+v", s.Ports)
			}
			return nil
		}},
		{"type NodePort on a ClusterIP resource", nil, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort },
			func(s *corev1.ServiceSpec) error {
				return expect([]any{s.Type, s.Ports[0].NodePort}, []any{corev1.ServiceTypeClusterIP, int32(0)})
			}},
		{"external traffic policy Local", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.Type = corev1.ServiceTypeNodePort },
			func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
			func(s *corev1.ServiceSpec) error {
				return expect(s.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyCluster)
			}},
		{"internal traffic policy Local", nil,
			func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyLocal) },
			func(s *corev1.ServiceSpec) error {
				return expect(s.InternalTrafficPolicy, new(corev1.ServiceInternalTrafficPolicyCluster))
			}},
		{"publish not ready addresses", nil, func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true },
			func(s *corev1.ServiceSpec) error { return expect(s.PublishNotReadyAddresses, false) }},
		{"session affinity", nil, func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP },
			func(s *corev1.ServiceSpec) error {
				return expect([]any{s.SessionAffinity, s.SessionAffinityConfig == nil}, []any{corev1.ServiceAffinityNone, true})
			}},
		{"external IPs", nil, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.10"} },
			func(s *corev1.ServiceSpec) error { return expect(len(s.ExternalIPs), 0) }},
		{"traffic distribution", nil, func(s *corev1.Service) { s.Spec.TrafficDistribution = new("PreferClose") },
			func(s *corev1.ServiceSpec) error { return expect(s.TrafficDistribution, (*string)(nil)) }},
		{"load balancer source ranges", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.Type = corev1.ServiceTypeLoadBalancer },
			func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"} },
			func(s *corev1.ServiceSpec) error { return expect(len(s.LoadBalancerSourceRanges), 0) }},
		// Fields the spec sets: the edit takes them from the controller's
		// field manager, the forced apply takes them back.
		{"target port the spec sets", nil, func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(9999) },
			func(s *corev1.ServiceSpec) error { return expect(s.Ports[0].TargetPort, intstr.FromInt32(8080)) }},
		{"type the spec sets", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.Type = corev1.ServiceTypeNodePort },
			func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer },
			func(s *corev1.ServiceSpec) error { return expect(s.Type, corev1.ServiceTypeNodePort) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("d%d", i)
			swh := newResource(ns, name)
			if tt.spec != nil {
				tt.spec(&swh.Spec)
			}
			if err := controlPlane.Client.Create(ctx, swh); err != nil {
				t.Fatal(err)
			}
			waitSynced(t, ctx, ns, name)
			editService(t, ctx, ns, name, tt.edit)
			harness.Eventually(t, 20*time.Second, "put back and reported", func() error {
				svc, err := getService(ctx, ns, name)
				if err != nil {
					return err
				}
				if err := tt.check(&svc.Spec); err != nil {
					return err
				}
				note, err := eventNote(ctx, ns, name, swhv1alpha1.EventReasonServiceDriftReverted)
				if err != nil {
					return err
				}
				if !strings.Contains(note, editor) {
					return fmt.Errorf("event note %q does not name %s", note, editor)
				}
				return nil
			})
			waitSynced(t, ctx, ns, name)
		})
	}
}

// TestProxyLabelIsReported: someone labels the child Service with
// service.kubernetes.io/service-proxy-name. kube-proxy then ignores it (and
// the agents' slices, which copy the label): another proxy is meant to
// handle it. Labels the controller does not set are not its to remove; it
// reports the label, and is in line again once the resource carries it.
func TestProxyLabelIsReported(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	if err := controlPlane.Client.Create(ctx, newResource(ns, "edge")); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "edge")
	const label = "service.kubernetes.io/service-proxy-name"
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+label+`":"other-proxy"}}}`))
	if err := controlPlane.Client.Patch(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}}, patch, client.FieldOwner(editor)); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "the label reported", func() error {
		c, err := condition(t, ctx, ns, "edge")()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != swhv1alpha1.ReasonServiceDrifted || !strings.Contains(c.Message, label) || !strings.Contains(c.Message, editor) {
			return fmt.Errorf("condition %+v", c)
		}
		return hasEvent(ctx, ns, "edge", swhv1alpha1.ReasonServiceDrifted)
	})
	time.Sleep(2 * time.Second)
	svc, err := getService(ctx, ns, "edge")
	if err != nil {
		t.Fatal(err)
	}
	if svc.Labels[label] != "other-proxy" {
		t.Errorf("labels %v: the controller removed a label it does not set", svc.Labels)
	}
	// Meant: the resource says so, and the controller owns the label too.
	updateResource(t, ctx, ns, "edge", func(got *swhv1alpha1.ServiceWithHealthchecks) {
		got.Labels = map[string]string{label: "other-proxy"}
	})
	waitSynced(t, ctx, ns, "edge")
}
