package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// cleanNode deletes a node when the test ends.
func cleanNode(t *testing.T, name string) {
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// endpointStates returns the ready and serving conditions of a slice's
// endpoints as T and F, two letters an endpoint: "TT" ready and serving.
func endpointStates(ctx context.Context, s *discoveryv1.EndpointSlice) (string, error) {
	got := &discoveryv1.EndpointSlice{}
	if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
		return "", err
	}
	tf := func(b *bool) string {
		if b != nil && *b {
			return "T"
		}
		return "F"
	}
	var out []string
	for _, ep := range got.Endpoints {
		out = append(out, tf(ep.Conditions.Ready)+tf(ep.Conditions.Serving))
	}
	return strings.Join(out, ","), nil
}

func waitStates(t *testing.T, ctx context.Context, s *discoveryv1.EndpointSlice, want string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, "endpoints "+want, func() error {
		got, err := endpointStates(ctx, s)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("endpoints %s, want %s", got, want)
		}
		return nil
	})
}

// setReady writes a node's Ready condition as the node lifecycle controller
// or a kubelet would.
func setReady(t *testing.T, ctx context.Context, node string, status corev1.ConditionStatus) {
	t.Helper()
	if _, err := harness.SetNodeReady(ctx, controlPlane.Client, node, status); err != nil {
		t.Fatal(err)
	}
}

// TestNodeReadyConditionDecides: only a Ready condition that is not True
// withdraws a node's endpoints. A node with no Ready condition at all (no
// kubelet ever reported) is left alone; Ready=False (a kubelet that says so)
// withdraws like Unknown; the endpoints of a Service that publishes
// not-ready addresses stay ready and stop serving.
func TestNodeReadyConditionDecides(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	pnra := newResource(ns, "pnra")
	pnra.Spec.PublishNotReadyAddresses = true
	if err := controlPlane.Client.Create(ctx, pnra); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "pnra")

	tests := []struct {
		name     string
		resource string
		status   corev1.ConditionStatus // "": the node never gets a Ready condition
		want     string
	}{
		{"no Ready condition", "web", "", "TT"},
		{"Ready=False", "web", corev1.ConditionFalse, "FF"},
		{"Ready=Unknown, publishNotReadyAddresses", "pnra", corev1.ConditionUnknown, "TF"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := fmt.Sprintf("cond%d-%s", i, ns)
			cleanNode(t, node)
			if tt.status == "" {
				if err := controlPlane.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
				t.Fatal(err)
			}
			s := agentSlice(ns, tt.resource, "http", node, discoveryv1.AddressTypeIPv4,
				endpoint(fmt.Sprintf("p%d", i), fmt.Sprintf("uid-p%d", i), fmt.Sprintf("10.244.5.%d", i+1), node, true))
			if err := controlPlane.Client.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
			withdrawn := c.counter(t, "swh_controller_endpoints_withdrawn_total", nil)
			if tt.status == "" {
				// The slice's creation woke the node health controller.
				time.Sleep(2 * time.Second)
				if got, err := endpointStates(ctx, s); err != nil || got != tt.want {
					t.Errorf("endpoints %s (%v) on a node with no Ready condition, want %s: left alone", got, err, tt.want)
				}
				if now := c.counter(t, "swh_controller_endpoints_withdrawn_total", nil); now != withdrawn {
					t.Errorf("%v endpoints withdrawn on a node with no Ready condition", now-withdrawn)
				}
				return
			}
			setReady(t, ctx, node, tt.status)
			waitStates(t, ctx, s, tt.want)
			// The counter moves once the update has returned, which may be
			// after the test saw the slice change.
			harness.Eventually(t, 5*time.Second, "the withdrawal counted", func() error {
				if now := c.counter(t, "swh_controller_endpoints_withdrawn_total", nil); now != withdrawn+1 {
					return fmt.Errorf("swh_controller_endpoints_withdrawn_total grew by %v, want 1", now-withdrawn)
				}
				return nil
			})
		})
	}
}

// TestWithdrawalDelayObservedOnce: the delay histogram measures how long a
// node's endpoints stayed in service after its Ready condition changed. A
// late write of its agent, withdrawn again minutes later, is not another
// such delay; a new not-Ready period is.
func TestWithdrawalDelayObservedOnce(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	node := "late-" + ns
	cleanNode(t, node)
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
		t.Fatal(err)
	}
	s := agentSlice(ns, "web", "http", node, discoveryv1.AddressTypeIPv4, endpoint("web-0", "uid-web-0", "10.244.5.9", node, true))
	if err := controlPlane.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	const delay = "swh_controller_node_withdrawal_delay_seconds"
	setReady(t, ctx, node, corev1.ConditionUnknown)
	waitStates(t, ctx, s, "FF")
	harness.Eventually(t, 5*time.Second, "the delay observed", func() error {
		if n := c.histogramCount(t, delay); n != 1 {
			return fmt.Errorf("%d observations", n)
		}
		return nil
	})

	// The agent, partitioned, writes late what it last knew.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &discoveryv1.EndpointSlice{}
		if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			return err
		}
		got.Endpoints[0].Conditions.Ready, got.Endpoints[0].Conditions.Serving = new(true), new(true)
		return controlPlane.Client.Update(ctx, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "withdrawn again", func() error {
		if n := c.counter(t, "swh_controller_endpoints_withdrawn_total", nil); n != 2 {
			return fmt.Errorf("%v endpoints withdrawn", n)
		}
		return nil
	})
	waitStates(t, ctx, s, "FF")
	if n := c.histogramCount(t, delay); n != 1 {
		t.Errorf("%s has %d observations after a late agent write withdrawn again, want 1", delay, n)
	}

	// Ready, then not Ready again: a new period, a new delay. The
	// condition's transition time has whole seconds.
	setReady(t, ctx, node, corev1.ConditionTrue)
	time.Sleep(1100 * time.Millisecond)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := &discoveryv1.EndpointSlice{}
		if err := controlPlane.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.Name}, got); err != nil {
			return err
		}
		got.Endpoints[0].Conditions.Ready, got.Endpoints[0].Conditions.Serving = new(true), new(true)
		return controlPlane.Client.Update(ctx, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	setReady(t, ctx, node, corev1.ConditionFalse)
	waitStates(t, ctx, s, "FF")
	harness.Eventually(t, 5*time.Second, "a new not-Ready period observed", func() error {
		if n := c.histogramCount(t, delay); n != 2 {
			return fmt.Errorf("%d observations", n)
		}
		return nil
	})
}

// TestNodeCacheIsTrimmed: the controller keeps every Node of the cluster in
// memory; what kubelets report beyond conditions and addresses (images,
// volumes, node info) is most of a Node's size and nothing the controller
// reads.
func TestNodeCacheIsTrimmed(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	name := "trim-" + namespace(t)
	cleanNode(t, name)
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: name, Zone: "zone-trim", InternalIP: "192.0.2.7"}); err != nil {
		t.Fatal(err)
	}
	api := &corev1.Node{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := controlPlane.Client.Get(ctx, types.NamespacedName{Name: name}, api); err != nil {
			return err
		}
		api.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/app@sha256:0123"}, SizeBytes: 1 << 30}}
		api.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/driver^vol-1"}
		api.Status.NodeInfo.KubeletVersion = "v1.37.2"
		return controlPlane.Client.Status().Update(ctx, api)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(api.Status.Images) == 0 || len(api.ManagedFields) == 0 {
		t.Fatalf("the API server's Node has no images or managed fields: the test proves nothing")
	}
	cached := &corev1.Node{}
	harness.Eventually(t, 10*time.Second, "the cache has the Node's status", func() error {
		if err := c.cache.Get(ctx, types.NamespacedName{Name: name}, cached); err != nil {
			return err
		}
		if cached.ResourceVersion != api.ResourceVersion {
			return fmt.Errorf("cached version %s, want %s", cached.ResourceVersion, api.ResourceVersion)
		}
		return nil
	})
	if cached.Status.Images != nil || cached.Status.VolumesInUse != nil || cached.Status.NodeInfo.KubeletVersion != "" || cached.ManagedFields != nil {
		t.Errorf("the cached Node keeps what the controller does not read: images %v, volumes %v, node info %+v, %d managed fields",
			cached.Status.Images, cached.Status.VolumesInUse, cached.Status.NodeInfo, len(cached.ManagedFields))
	}
	if cached.Labels[harness.ZoneLabel] != "zone-trim" || len(cached.Status.Conditions) == 0 || len(cached.Status.Addresses) == 0 {
		t.Errorf("the cached Node lost what the controller reads: labels %v, conditions %v, addresses %v",
			cached.Labels, cached.Status.Conditions, cached.Status.Addresses)
	}
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}}
	if err := c.cache.Get(ctx, types.NamespacedName{Name: name}, meta); err != nil {
		t.Fatal(err)
	}
	if meta.ManagedFields != nil {
		t.Errorf("the metadata-only Node keeps %d managed fields", len(meta.ManagedFields))
	}
}
