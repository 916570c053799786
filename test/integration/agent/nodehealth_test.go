package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// setNodeReady writes a node's Ready condition and returns when.
func setNodeReady(t *testing.T, name string, status corev1.ConditionStatus) time.Time {
	t.Helper()
	at, err := harness.SetNodeReady(context.Background(), controlPlane.Client, name, status)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// waitWithdrawal waits until the slices are want and returns how long after
// since they were.
func waitWithdrawal(t *testing.T, ns, name string, want map[string]string, since time.Time) time.Duration {
	t.Helper()
	waitPublished(t, ns, name, want)
	return time.Since(since)
}

// TestNodeNotReadyWithdrawsEndpoints: when a node's Ready condition turns
// Unknown, its endpoints stop being ready and serving within seconds,
// whether its agent is dead (the controller writes) or alive (the agent
// agrees, and the two never undo each other); when the node is Ready again
// and its agent publishes, the endpoints come back.
func TestNodeNotReadyWithdrawsEndpoints(t *testing.T) {
	const node = "node-dark"
	ctx := context.Background()
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node, Zone: "zone-dark"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = controlPlane.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) })
	ns := namespace(t)
	startBackend(t, ns, "dark", "dark-a", node)
	startBackend(t, ns, "dark", "dark-b", node)
	swh := resource(ns, "dark", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	ready := map[string]string{"dark-web-node-dark": "dark-a:TTF,dark-b:TTF"}
	withdrawn := map[string]string{"dark-web-node-dark": "dark-a:FFF,dark-b:FFF"}
	a := startAgent(t, node)
	waitPublished(t, ns, "dark", ready)

	// The machine is lost: its agent dies, then the node lifecycle
	// controller finds the node silent. Only the controller can act.
	a.Stop()
	took := waitWithdrawal(t, ns, "dark", withdrawn, setNodeReady(t, node, corev1.ConditionUnknown))
	t.Logf("agent dead: Ready=Unknown to withdrawn in %v", took)
	for _, pod := range []string{"dark-a", "dark-b"} {
		if r := waitReason(t, ns, "dark", pod, swhv1alpha1.ReasonNodeNotReady); r.Message != "node node-dark is not Ready" || r.Probe != nil {
			t.Errorf("reason of %s after the controller withdrew it: %+v", pod, r)
		}
	}
	harness.Eventually(t, 30*time.Second, "a NodeNotReady event on the resource", func() error {
		list := &eventsv1.EventList{}
		if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == "NodeNotReady" && e.Regarding.Name == "dark" && e.Related != nil && e.Related.Name == node {
				return nil
			}
		}
		return fmt.Errorf("%d events, none NodeNotReady", len(list.Items))
	})

	// Ready again: nobody publishes until the agent runs, then it does.
	setNodeReady(t, node, corev1.ConditionTrue)
	time.Sleep(time.Second)
	waitPublished(t, ns, "dark", withdrawn)
	a = startAgent(t, node)
	waitPublished(t, ns, "dark", ready)

	// The node goes silent while its agent runs (a kubelet that died, a
	// partition): the agent withdraws too, and the two writers agree for
	// several periods.
	took = waitWithdrawal(t, ns, "dark", withdrawn, setNodeReady(t, node, corev1.ConditionUnknown))
	t.Logf("agent alive: Ready=Unknown to withdrawn in %v", took)
	waitReason(t, ns, "dark", "dark-a", swhv1alpha1.ReasonNodeNotReady)
	w := watchSteady(ns, "dark", withdrawn)
	_, versions, err := sliceReasons(ctx, ns, "dark")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	w.check(t, "while the node was not Ready with its agent running")
	// Reasons included: neither writer rewrites the other's entries.
	if _, again, err := sliceReasons(ctx, ns, "dark"); err != nil || fmt.Sprint(again) != fmt.Sprint(versions) {
		t.Errorf("slices rewritten while both writers agreed: versions %v then %v (%v)", versions, again, err)
	}

	setNodeReady(t, node, corev1.ConditionTrue)
	waitPublished(t, ns, "dark", ready)
	a.Stop()
}
