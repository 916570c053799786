package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// sliceDeletions watches the slices of a namespace and records the names of
// those deleted, until the test ends.
func sliceDeletions(t *testing.T, ns string) func() []string {
	t.Helper()
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &discoveryv1.EndpointSliceList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var deleted []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*discoveryv1.EndpointSlice); ok && ev.Type == watch.Deleted {
				mu.Lock()
				deleted = append(deleted, s.Name)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), deleted...)
	}
}

// TestRefusedSpecKeepsSlices: the spec renames the only port and gives it
// a node port another Service holds. The API server refuses the Service, so
// the live Service keeps port "http", and the agents, which publish what the
// live Service says, keep its slices: the controller must delete none of
// them (it would race the agents, which recreate them at once), however
// often it reconciles, and must say why the spec is not applied. Once the
// spec can be applied, the slices of the port the Service no longer has go.
func TestRefusedSpecKeepsSlices(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	node := "refused-" + ns
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	swh := newResource(ns, "pay")
	swh.Spec.Type = corev1.ServiceTypeNodePort
	swh.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "child Service created", func() error { _, err := getService(ctx, ns, "pay"); return err })
	v4 := agentSlice(ns, "pay", "http", node, discoveryv1.AddressTypeIPv4, endpoint("pay-0", "uid-pay-0", "10.244.7.1", node, true))
	v6 := agentSlice(ns, "pay", "http", node, discoveryv1.AddressTypeIPv6, endpoint("pay-0", "uid-pay-0", "fd00:10:244::7:1", node, true))
	for _, s := range []*discoveryv1.EndpointSlice{v4, v6} {
		if err := controlPlane.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// Another Service holds a node port; the new spec asks for it.
	blocker := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "blocker"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if err := controlPlane.Client.Create(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	cond := condition(t, ctx, ns, "pay")
	harness.Eventually(t, 20*time.Second, "synced with the agents' slices counted", func() error {
		c, err := cond()
		if err != nil {
			return err
		}
		if c.Reason != swhv1alpha1.ReasonSynced || getResource(t, ctx, ns, "pay").Status.Ready != "1/1" {
			return fmt.Errorf("condition %+v, ready %q", c, getResource(t, ctx, ns, "pay").Status.Ready)
		}
		return nil
	})

	deleted := sliceDeletions(t, ns)
	collected := c.counter(t, "swh_controller_slices_collected_total", nil)
	updateResource(t, ctx, ns, "pay", func(got *swhv1alpha1.ServiceWithHealthchecks) {
		got.Spec.Ports = []swhv1alpha1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: blocker.Spec.Ports[0].NodePort}}
	})
	harness.Eventually(t, 20*time.Second, "the refusal reported", func() error {
		c, err := cond()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != swhv1alpha1.ReasonServiceRejected || c.ObservedGeneration != getResource(t, ctx, ns, "pay").Generation {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	// Several agent periods: each write of a slice, as an agent publishing a
	// probe result, makes the controller reconcile the resource.
	for i := range 6 {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &discoveryv1.EndpointSlice{}
			if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(v4), got); err != nil {
				return err
			}
			got.Endpoints[0].Conditions.Ready = new(i%2 == 1)
			return controlPlane.Client.Update(ctx, got)
		})
		if err != nil {
			t.Fatalf("the agent's write %d: %v (the slice was deleted: %v)", i, err, apierrors.IsNotFound(err))
		}
		time.Sleep(time.Second)
	}
	if d := deleted(); len(d) > 0 {
		t.Errorf("slices deleted while the live Service still has their port: %v", d)
	}
	if now := c.counter(t, "swh_controller_slices_collected_total", nil); now != collected {
		t.Errorf("%v slices collected while the spec was refused, want 0", now-collected)
	}
	svc, err := getService(ctx, ns, "pay")
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" {
		t.Fatalf("live ports %+v, want the old port http (the API server refused the new spec)", svc.Spec.Ports)
	}

	// The spec can be applied: the Service loses "http", so do the slices.
	updateResource(t, ctx, ns, "pay", func(got *swhv1alpha1.ServiceWithHealthchecks) { got.Spec.Ports[0].NodePort = 0 })
	harness.Eventually(t, 20*time.Second, "applied; the slices of the removed port collected", func() error {
		c, err := cond()
		if err != nil {
			return err
		}
		if c.Reason != swhv1alpha1.ReasonSynced {
			return fmt.Errorf("condition %+v", c)
		}
		for _, s := range []*discoveryv1.EndpointSlice{v4, v6} {
			if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(s), &discoveryv1.EndpointSlice{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("slice %s still there (%v)", s.Name, err)
			}
		}
		return nil
	})
}
