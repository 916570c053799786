package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/e2e"
	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/harness"
)

// TestNodeFailure (scenario 5): one node's machine loses power (kubelet,
// containerd, its agent and pods end at once; the Node object stays). The
// node lifecycle controller marks it NotReady and the controller withdraws
// its endpoints; after that, no request from the other nodes fails. Powered
// on again, the node returns to service with its pod.
func TestNodeFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := serve(ctx, t, workload(testNamespace(t), "web", 3))
	victim := cluster.Nodes[len(cluster.Nodes)-1]
	var lost corev1.Pod
	var others []corev1.Pod
	for _, p := range s.pods {
		if p.Spec.NodeName == victim.Name {
			lost = p
		} else {
			others = append(others, p)
		}
	}
	if lost.Name == "" {
		t.Fatalf("no pod on %s: %v", victim.Name, podNames(s.pods))
	}
	// Requests sent while the lost pod is still published leave conntrack
	// entries DNATed to it, which kube-proxy does not remove; the clients'
	// dialer holds back the source ports of failed connections for 5 min
	// (netns), so the figure after convergence is about our endpoints, not
	// about the kernel's reuse of ports.
	clients := cluster.Nodes[:len(cluster.Nodes)-1]
	var ls loops
	for _, n := range clients {
		ls = append(ls, e2e.StartLoop(ctx, e2e.HTTPGet(n.Client.NS, s.url)))
	}
	// When the controller's leader runs on the lost node, the withdrawal
	// waits for the standby to take the Lease over (15 s by default).
	leaderPod := strings.SplitN(leaseHolder(ctx, t), "_", 2)[0]
	var leader corev1.Pod
	if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: realnode.ChartNamespace, Name: leaderPod}, &leader); err != nil {
		t.Fatal(err)
	}
	leaderWhere := "the controller's leader on " + leader.Spec.NodeName
	start := time.Now()
	victim.PowerOff()
	t.Cleanup(func() {
		if !victim.Machine.Running() {
			_ = victim.PowerOn()
		}
	})
	// Withdrawn: only the other nodes' pods are published ready.
	harness.Eventually(t, convergeTimeout, lost.Name+" withdrawn", func() error {
		got, err := readyEndpoints(ctx, s.ns, s.name)
		if err != nil {
			return err
		}
		if _, still := got[lost.Status.PodIP]; still || len(got) != len(others) {
			return fmt.Errorf("ready: %v", got)
		}
		return nil
	})
	withdrawn := time.Since(start)
	var node corev1.Node
	if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Name: victim.Name}, &node); err != nil {
		t.Fatal(err)
	}
	readyCond := ""
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			readyCond = fmt.Sprintf("Ready=%s (%s) %s after the power cut", c.Status, c.Reason, c.LastTransitionTime.Sub(start).Round(time.Second))
		}
	}
	if readyCond == "" {
		t.Fatalf("%s's endpoints were withdrawn while the node is still Ready:\n%s", victim.Name, nodeConditions())
	}
	if err := cluster.WaitProgrammedWithout(ctx, lost.Status.PodIP); err != nil {
		t.Fatal(err)
	}
	during := ls.stop()
	ls = ls[:0]
	for _, n := range clients {
		ls = append(ls, e2e.StartLoop(ctx, e2e.HTTPGet(n.Client.NS, s.url)))
	}
	time.Sleep(5 * time.Second)
	after := ls.stop()
	if !after.LandsOnly(podNames(others)...) {
		t.Fatalf("after %s's endpoints were withdrawn: %s, want every request answered by %v", victim.Name, after, podNames(others))
	}

	// Power back on: the node turns Ready and its pod serves again (kubelet
	// starts it anew, maybe at a new address).
	back := time.Now()
	if err := victim.PowerOn(); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodesReady(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	var restarted []corev1.Pod
	harness.Eventually(t, 3*time.Minute, lost.Name+" running again", func() error {
		var p corev1.Pod
		if err := cluster.CP.Client.Get(ctx, client.ObjectKeyFromObject(&lost), &p); err != nil {
			return err
		}
		if p.Status.PodIP == "" || !podReady(&p) {
			return fmt.Errorf("phase %s, IP %q", p.Status.Phase, p.Status.PodIP)
		}
		restarted = append(append(restarted[:0], others...), p)
		return nil
	})
	waitReadyPods(ctx, t, s.ns, s.name, restarted)
	returned := time.Since(back)
	ls = startLoops(ctx, s.url)
	time.Sleep(3 * time.Second)
	final := ls.stop()
	if !final.LandsOnly(podNames(restarted)...) || len(final.Landed) != 3 {
		t.Fatalf("after %s came back: %s, want every request answered, by all of %v", victim.Name, final, podNames(restarted))
	}
	report(t, "5 node failure", after,
		fmt.Sprintf("power off → endpoints withdrawn %s (node grace period %s; %s; %s)", withdrawn.Round(100*time.Millisecond), "10s", readyCond, leaderWhere),
		"until then "+during.String(),
		"power on → back in service "+returned.Round(100*time.Millisecond).String(),
		"then "+final.String())
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
