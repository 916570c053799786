package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// noEvent fails the test when the resource has an event of that reason.
func noEvent(t *testing.T, ctx context.Context, ns, name, reason string) {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			t.Errorf("event %s on %s: %s", reason, name, e.Note)
		}
	}
}

// TestRefusedEditKeepsEveryLivePort: the live Service has ports 80 and 443;
// the new spec drops 80 and adds 8080 with a node port another Service
// holds. The API server refuses the new Service, so it must stay exactly as
// it was: port 80 too, and the agents' slices of it. The controller must not
// take port 80 away on its own before the apply fails (a refused edit never
// takes a port down), nor call the spec's own change someone else's.
func TestRefusedEditKeepsEveryLivePort(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	node := "twoport-" + ns
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	swh := newResource(ns, "shop")
	swh.Spec.Type = corev1.ServiceTypeNodePort
	swh.Spec.Ports = []swhv1alpha1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
	}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "shop")
	http := agentSlice(ns, "shop", "http", node, discoveryv1.AddressTypeIPv4, endpoint("shop-0", "uid-shop-0", "10.244.6.1", node, true))
	https := agentSlice(ns, "shop", "https", node, discoveryv1.AddressTypeIPv4, endpoint("shop-0", "uid-shop-0", "10.244.6.1", node, true))
	for _, s := range []*discoveryv1.EndpointSlice{http, https} {
		if err := controlPlane.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	blocker := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "blocker"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if err := controlPlane.Client.Create(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "both ports counted", func() error {
		if got := getResource(t, ctx, ns, "shop").Status.Ready; got != "1/1" {
			return fmt.Errorf("ready %q", got)
		}
		return nil
	})

	deleted := sliceDeletions(t, ns)
	reverts := c.counter(t, "swh_controller_service_reverts_total", nil)
	updateResource(t, ctx, ns, "shop", func(got *swhv1alpha1.ServiceWithHealthchecks) {
		got.Spec.Ports = []swhv1alpha1.ServicePort{
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
			{Name: "alt", Port: 8080, TargetPort: intstr.FromInt32(8080), NodePort: blocker.Spec.Ports[0].NodePort},
		}
	})
	harness.Eventually(t, 20*time.Second, "the refusal reported", func() error {
		c, err := condition(t, ctx, ns, "shop")()
		if err != nil {
			return err
		}
		if c.Reason != swhv1alpha1.ReasonServiceRejected || c.ObservedGeneration != getResource(t, ctx, ns, "shop").Generation {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	// Several agent writes, each a reconcile of the resource.
	for i := range 4 {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &discoveryv1.EndpointSlice{}
			if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(http), got); err != nil {
				return err
			}
			got.Endpoints[0].Conditions.Ready = new(i%2 == 1)
			return controlPlane.Client.Update(ctx, got)
		})
		if err != nil {
			t.Fatalf("the agent's write %d: %v", i, err)
		}
		time.Sleep(750 * time.Millisecond)
	}
	svc, err := getService(ctx, ns, "shop")
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, p := range svc.Spec.Ports {
		live = append(live, fmt.Sprintf("%s:%d", p.Name, p.Port))
	}
	if fmt.Sprint(live) != "[http:80 https:443]" {
		t.Errorf("live ports %v after a refused edit, want [http:80 https:443] as before it", live)
	}
	if d := deleted(); len(d) > 0 {
		t.Errorf("slices deleted after a refused edit: %v", d)
	}
	if now := c.counter(t, "swh_controller_service_reverts_total", nil); now != reverts {
		t.Errorf("swh_controller_service_reverts_total grew by %v: the spec's own edit counted as someone else's", now-reverts)
	}
	noEvent(t, ctx, ns, "shop", swhv1alpha1.EventReasonServiceDriftReverted)
}

// TestSpecEditIsNotDrift: fields the spec stops setting go with the apply,
// a value it changes is applied, and the controller says nothing about
// someone else having changed the Service, neither for a Service it created
// nor for one it adopted (whose previous manager still holds the fields it
// had set).
func TestSpecEditIsNotDrift(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	full := func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
		s.Type = corev1.ServiceTypeNodePort
		s.Ports = []swhv1alpha1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
		}
		s.PublishNotReadyAddresses = true
		s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.ExternalIPs = []string{"192.0.2.20"}
	}
	for _, adopted := range []bool{false, true} {
		t.Run(fmt.Sprintf("adopted=%v", adopted), func(t *testing.T) {
			name := "edit"
			if adopted {
				name = "adopted"
			}
			swh := newResource(ns, name)
			full(&swh.Spec)
			if adopted {
				// What the user had before migrating, created by kubectl.
				spec := swh.Spec.ServiceSpec()
				spec.Selector = nil
				old := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
				if err := controlPlane.Client.Create(ctx, old, client.FieldOwner("kubectl-create")); err != nil {
					t.Fatal(err)
				}
				swh.Annotations = map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
			}
			if err := controlPlane.Client.Create(ctx, swh); err != nil {
				t.Fatal(err)
			}
			waitSynced(t, ctx, ns, name)
			reverts := c.counter(t, "swh_controller_service_reverts_total", nil)

			updateResource(t, ctx, ns, name, func(got *swhv1alpha1.ServiceWithHealthchecks) {
				got.Spec.Ports = got.Spec.Ports[1:]
				got.Spec.Ports[0].TargetPort = intstr.FromInt32(9443)
				got.Spec.PublishNotReadyAddresses = false
				got.Spec.ExternalTrafficPolicy = ""
				got.Spec.ExternalIPs = nil
			})
			harness.Eventually(t, 20*time.Second, "the Service follows the spec", func() error {
				svc, err := getService(ctx, ns, name)
				if err != nil {
					return err
				}
				s := &svc.Spec
				return expect([]any{len(s.Ports), s.Ports[0].Port, s.Ports[0].TargetPort, s.PublishNotReadyAddresses, s.ExternalTrafficPolicy, len(s.ExternalIPs)},
					[]any{1, int32(443), intstr.FromInt32(9443), false, corev1.ServiceExternalTrafficPolicyCluster, 0})
			})
			waitSynced(t, ctx, ns, name)
			time.Sleep(time.Second)
			if now := c.counter(t, "swh_controller_service_reverts_total", nil); now != reverts {
				t.Errorf("swh_controller_service_reverts_total grew by %v after a spec edit", now-reverts)
			}
			noEvent(t, ctx, ns, name, swhv1alpha1.EventReasonServiceDriftReverted)
		})
	}
}
