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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// plainService is a Service with a selector, as a user had it before
// migrating, and the slice the built-in controller made for it.
func plainService(t *testing.T, ctx context.Context, ns, name string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if err := controlPlane.Client.Create(ctx, svc, client.FieldOwner("kubectl-client-side-apply")); err != nil {
		t.Fatal(err)
	}
	builtin := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abcde", Labels: map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.9.1"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
	}
	if err := controlPlane.Client.Create(ctx, builtin); err != nil {
		t.Fatal(err)
	}
	return svc, builtin
}

func condition(t *testing.T, ctx context.Context, ns, name string) func() (*metav1.Condition, error) {
	return func() (*metav1.Condition, error) {
		c := meta.FindStatusCondition(getResource(t, ctx, ns, name).Status.Conditions, swhv1alpha1.ConditionServiceSynced)
		if c == nil {
			return nil, fmt.Errorf("no %s condition yet", swhv1alpha1.ConditionServiceSynced)
		}
		return c, nil
	}
}

func hasEvent(ctx context.Context, ns, name, reason string) error {
	return hasEventOfType(ctx, ns, name, reason, "")
}

// hasEventOfType is hasEvent for events of one type (Normal, Warning);
// "" is any.
func hasEventOfType(ctx context.Context, ns, name, reason, eventType string) error {
	list := &eventsv1.EventList{}
	if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason && (eventType == "" || e.Type == eventType) {
			return nil
		}
	}
	return fmt.Errorf("no %s event %s on %s among %d events", eventType, reason, name, len(list.Items))
}

func TestConflictingServiceIsLeftAlone(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	svc, _ := plainService(t, ctx, ns, "legacy")
	if err := controlPlane.Client.Create(ctx, newResource(ns, "legacy")); err != nil {
		t.Fatal(err)
	}
	cond := condition(t, ctx, ns, "legacy")
	harness.Eventually(t, 20*time.Second, "conflict reported", func() error {
		c, err := cond()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != swhv1alpha1.ReasonServiceNotOwned {
			return fmt.Errorf("condition %+v", c)
		}
		return hasEvent(ctx, ns, "legacy", swhv1alpha1.ReasonServiceNotOwned)
	})
	got, err := getService(ctx, ns, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != svc.ResourceVersion || len(got.Spec.Selector) == 0 {
		t.Errorf("the conflicting Service was modified: %+v", got)
	}
}

func TestAdoptionKeepsClusterIPAndWaitsForAgentSlices(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: "adopt-node-" + ns}); err != nil {
		t.Fatal(err)
	}
	svc, builtin := plainService(t, ctx, ns, "shop")
	if _, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{Namespace: ns, Name: "shop-0", Node: "adopt-node-" + ns,
		Labels: map[string]string{"app": "shop"}, IPs: []string{"10.244.9.1"}}); err != nil {
		t.Fatal(err)
	}
	swh := newResource(ns, "shop")
	swh.Spec.Type = corev1.ServiceTypeNodePort
	swh.Annotations = map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "Service adopted", func() error {
		got, err := getService(ctx, ns, "shop")
		if err != nil {
			return err
		}
		if len(got.Spec.Selector) != 0 || metav1.GetControllerOf(got) == nil {
			return fmt.Errorf("selector %v, controller %v", got.Spec.Selector, metav1.GetControllerOf(got))
		}
		if got.Spec.ClusterIP != svc.Spec.ClusterIP || got.Spec.Ports[0].NodePort != svc.Spec.Ports[0].NodePort {
			return fmt.Errorf("cluster IP %s (was %s), node port %d (was %d): adoption must keep them",
				got.Spec.ClusterIP, svc.Spec.ClusterIP, got.Spec.Ports[0].NodePort, svc.Spec.Ports[0].NodePort)
		}
		return nil
	})
	// Pods exist but no agent slice yet: the old slice must keep serving.
	time.Sleep(2 * time.Second)
	if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(builtin), &discoveryv1.EndpointSlice{}); err != nil {
		t.Fatalf("the built-in slice went before agent slices existed (traffic would drop): %v", err)
	}
	c, err := condition(t, ctx, ns, "shop")()
	if err != nil || c.Reason != swhv1alpha1.ReasonAdopting {
		t.Fatalf("condition %+v (%v), want reason %s while waiting", c, err, swhv1alpha1.ReasonAdopting)
	}
	// The agent publishes: now the old slice goes.
	node := "adopt-node-" + ns
	if err := controlPlane.Client.Create(ctx, agentSlice(ns, "shop", "http", node, discoveryv1.AddressTypeIPv4,
		endpoint("shop-0", "uid-shop-0", "10.244.9.1", node, true))); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "built-in slice removed", func() error {
		err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(builtin), &discoveryv1.EndpointSlice{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("built-in slice still there (%v)", err)
		}
		c, err := condition(t, ctx, ns, "shop")()
		if err != nil {
			return err
		}
		if c.Reason != swhv1alpha1.ReasonSynced {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

func TestAdoptionOfAServiceWithoutPodsIsImmediate(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	_, builtin := plainService(t, ctx, ns, "empty")
	swh := newResource(ns, "empty")
	swh.Spec.Type = corev1.ServiceTypeNodePort
	swh.Annotations = map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "built-in slice removed at once", func() error {
		err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(builtin), &discoveryv1.EndpointSlice{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("built-in slice still there (%v)", err)
		}
		return nil
	})
}

func TestImmutableFieldChangeIsReported(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	if err := controlPlane.Client.Create(ctx, newResource(ns, "fixed")); err != nil {
		t.Fatal(err)
	}
	var svc *corev1.Service
	harness.Eventually(t, 20*time.Second, "child Service created", func() (err error) {
		svc, err = getService(ctx, ns, "fixed")
		return err
	})
	updateResource(t, ctx, ns, "fixed", func(got *swhv1alpha1.ServiceWithHealthchecks) {
		got.Spec.ClusterIP = "10.96.0.99" // cluster IPs cannot change
		if got.Spec.ClusterIP == svc.Spec.ClusterIP {
			got.Spec.ClusterIP = "10.96.0.98"
		}
	})
	cond := condition(t, ctx, ns, "fixed")
	harness.Eventually(t, 20*time.Second, "rejection reported", func() error {
		c, err := cond()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != swhv1alpha1.ReasonServiceRejected || !strings.Contains(c.Message, "clusterIP") {
			return fmt.Errorf("condition %+v", c)
		}
		return hasEvent(ctx, ns, "fixed", swhv1alpha1.ReasonServiceRejected)
	})
	// No hot retry loop: the failed apply is not repeated while nothing changes.
	failures := c.counter(t, "swh_controller_service_writes_total", map[string]string{"result": "error"})
	time.Sleep(3 * time.Second)
	if again := c.counter(t, "swh_controller_service_writes_total", map[string]string{"result": "error"}); again != failures {
		t.Errorf("the rejected apply was retried %v times in 3 s with nothing changed", again-failures)
	}
	now, err := getService(ctx, ns, "fixed")
	if err != nil {
		t.Fatal(err)
	}
	if now.Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("cluster IP changed from %s to %s", svc.Spec.ClusterIP, now.Spec.ClusterIP)
	}
}
