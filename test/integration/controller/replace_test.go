package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// TestReplacedResourceWaitsForTheGarbageCollector: a resource deleted and
// created again at once (kubectl replace --force, a GitOps tool) meets the
// Service of the deleted one, still controlled by the old UID until the
// garbage collector deletes it. The controller waits for the collector,
// says so without a Warning and without asking anyone to adopt, and creates
// the Service again once kube-controller-manager's garbage collector has
// deleted the old one and its slices.
func TestReplacedResourceWaitsForTheGarbageCollector(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	const name = "replaced"
	node := "node-gc-" + ns
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
		t.Fatal(err)
	}
	if err := controlPlane.Client.Create(ctx, newResource(ns, name)); err != nil {
		t.Fatal(err)
	}
	first := getResource(t, ctx, ns, name)
	var oldService *corev1.Service
	harness.Eventually(t, 20*time.Second, "the first Service", func() error {
		svc, err := getService(ctx, ns, name)
		if err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(svc); ref == nil || ref.UID != first.UID {
			return fmt.Errorf("Service controlled by %v", ref)
		}
		oldService = svc
		return nil
	})
	// A slice an agent published for it, owned by the Service as agents do.
	slice := agentSlice(ns, name, "http", node, discoveryv1.AddressTypeIPv4, endpoint("p1", "u1", "10.244.9.1", node, true))
	slice.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(oldService, corev1.SchemeGroupVersion.WithKind("Service"))}
	if err := controlPlane.Client.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}

	// Deleted and created again at once, no garbage collector running yet:
	// the window stays open as long as the test wants.
	if err := controlPlane.Client.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "the first resource gone", func() error {
		err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(first), &swhv1alpha1.ServiceWithHealthchecks{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	if err := controlPlane.Client.Create(ctx, newResource(ns, name)); err != nil {
		t.Fatal(err)
	}
	second := getResource(t, ctx, ns, name)
	cond := condition(t, ctx, ns, name)
	harness.Eventually(t, 20*time.Second, "waiting for the garbage collector", func() error {
		c, err := cond()
		if err != nil {
			return err
		}
		if c.Reason != swhv1alpha1.ReasonAwaitingGarbageCollection {
			return fmt.Errorf("ServiceSynced %s: %s", c.Reason, c.Message)
		}
		return nil
	})
	// Events are written apart from the status: the event may lag it.
	harness.Eventually(t, 20*time.Second, "a Normal event AwaitingGarbageCollection", func() error {
		return hasEventOfType(ctx, ns, name, swhv1alpha1.ReasonAwaitingGarbageCollection, corev1.EventTypeNormal)
	})
	noEvent(t, ctx, ns, name, swhv1alpha1.ReasonServiceNotOwned)
	// The controller left the old Service alone: that is the collector's.
	if svc, err := getService(ctx, ns, name); err != nil || svc.UID != oldService.UID {
		t.Fatalf("the old Service was touched: %v, %v", svc, err)
	}

	kcm := harness.StartTestControllerManager(t, controlPlane, "garbagecollector")
	harness.Eventually(t, 90*time.Second, "the Service created again for the new resource", func() error {
		if err := kcm.Running(); err != nil {
			t.Fatal(err)
		}
		svc, err := getService(ctx, ns, name)
		if err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(svc); ref == nil || ref.UID != second.UID {
			return fmt.Errorf("Service controlled by %v", ref)
		}
		c, err := cond()
		if err != nil {
			return err
		}
		if c.Reason != swhv1alpha1.ReasonSynced {
			return fmt.Errorf("ServiceSynced %s: %s", c.Reason, c.Message)
		}
		return nil
	})
	harness.Eventually(t, 30*time.Second, "the old slice collected", func() error {
		err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(slice), &discoveryv1.EndpointSlice{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	noEvent(t, ctx, ns, name, swhv1alpha1.ReasonServiceNotOwned)
}
