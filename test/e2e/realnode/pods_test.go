package realnode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/harness"
)

// TestPodsRunOnEveryNode: a Deployment of the workload image spreads over
// the nodes, its pods get addresses of their node's range and answer.
func TestPodsRunOnEveryNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := testNamespace(t)
	d := workload(ns, "web", 3)
	if err := cluster.CP.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	pods := waitAvailable(ctx, t, ns, "web", 3)
	nodes := map[string]bool{}
	get := &http.Client{Timeout: 5 * time.Second}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = true
		var index int
		if _, err := fmt.Sscanf(p.Spec.NodeName, "node-%d", &index); err != nil || !strings.HasPrefix(p.Status.PodIP, fmt.Sprintf("10.246.%d.", index)) {
			t.Errorf("%s on %s has the address %s, not one of its node's range", p.Name, p.Spec.NodeName, p.Status.PodIP)
		}
		// Ready says the container started (the workload has no
		// readiness probe), not that its server listens yet: a refused
		// connection right after is no failure, one 20 s later is.
		var resp *http.Response
		harness.Eventually(t, 20*time.Second, fmt.Sprintf("%s (%s on %s) answering", p.Name, p.Status.PodIP, p.Spec.NodeName), func() error {
			var err error
			resp, err = get.Get(fmt.Sprintf("http://%s:8080/", p.Status.PodIP))
			return err
		})
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != p.Name {
			t.Errorf("%s on %s at %s answered %d %q, want 200 and its name", p.Name, p.Spec.NodeName, p.Status.PodIP, resp.StatusCode, body)
		}
	}
	if len(nodes) != len(cluster.Nodes) {
		t.Errorf("the pods run on %v, want one on every node", nodes)
	}
}

// workload is a Deployment of the swh-workload image.
func workload(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{
						Name:            "web",
						Image:           imageRef("swh-workload"),
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-http=:8080"},
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					}},
				},
			},
		},
	}
}

func imageRef(name string) string {
	for _, img := range imageList {
		if img.Name == name {
			return img.Ref
		}
	}
	panic("no image " + name)
}

// waitAvailable waits until the Deployment has n ready pods and returns them.
func waitAvailable(ctx context.Context, t testing.TB, ns, app string, n int) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	harness.Eventually(t, 2*time.Minute, fmt.Sprintf("%d ready pods of %s", n, app), func() error {
		var pods corev1.PodList
		if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
			return err
		}
		ready = ready[:0]
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready = append(ready, p)
				}
			}
		}
		if len(ready) != n {
			return fmt.Errorf("%d ready of %d pods", len(ready), len(pods.Items))
		}
		return nil
	})
	return ready
}

// testNamespace waits until the shared cluster is settled (an earlier
// test may have powered a node off and on, upgraded the chart or deleted a
// controller replica), then creates a namespace for the test and deletes
// it after: the namespace controller removes what the test made, and
// kubelet stops its pods. A failed test prints the cluster's state.
func testNamespace(t testing.TB) string {
	t.Helper()
	settle(t)
	ns := cluster.CP.TestNamespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster state at the failure:\n%s\n%s\ncontrollers' logs:\n%s\nagents' logs:\n%s", nodeConditions(),
				cluster.Diagnose(), cluster.PodLogs(realnode.ChartNamespace, "swh-controller-", 30), cluster.PodLogs(realnode.ChartNamespace, "swh-agent-", 30))
		}
		_ = cluster.CP.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	return ns
}

// settle waits until every node is Ready, an agent is ready on every node
// and both controller replicas are ready.
func settle(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if err := cluster.WaitNodesReady(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 3*time.Minute, "the chart's pods ready", func() error {
		return chartReady(ctx, false)
	})
}

// chartReady reports why an agent is not ready on every node or the two
// controller replicas are not ready. With backOffSettles, a controller
// replica kubelet holds in crash-loop back-off counts as settled once the
// other is Ready: each kill of the leader, each lost lead, restarts one and
// the back-off doubles from 10 s to 5 minutes, which is kubelet's wait, not
// the system's.
func chartReady(ctx context.Context, backOffSettles bool) error {
	var ds appsv1.DaemonSet
	if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: realnode.ChartNamespace, Name: "swh-agent"}, &ds); err != nil {
		return err
	}
	if ds.Status.ObservedGeneration != ds.Generation {
		return fmt.Errorf("agents: DaemonSet generation %d not yet observed", ds.Generation)
	}
	if n := int32(len(cluster.Nodes)); ds.Status.NumberReady != n || ds.Status.UpdatedNumberScheduled != n {
		return fmt.Errorf("agents: %d ready, %d updated of %d", ds.Status.NumberReady, ds.Status.UpdatedNumberScheduled, n)
	}
	var dep appsv1.Deployment
	if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: realnode.ChartNamespace, Name: "swh-controller"}, &dep); err != nil {
		return err
	}
	if dep.Status.ObservedGeneration != dep.Generation {
		return fmt.Errorf("controller: Deployment generation %d not yet observed", dep.Generation)
	}
	if dep.Status.Replicas == 2 && dep.Status.ReadyReplicas == 2 {
		return nil
	}
	notReady := fmt.Errorf("controller: %d ready of %d replicas", dep.Status.ReadyReplicas, dep.Status.Replicas)
	if !backOffSettles || dep.Status.Replicas != 2 {
		return notReady
	}
	var pods corev1.PodList
	if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(realnode.ChartNamespace), client.MatchingLabels{"app.kubernetes.io/component": "controller"}); err != nil {
		return err
	}
	ready, backingOff := 0, 0
	for _, p := range pods.Items {
		switch {
		case p.DeletionTimestamp != nil:
		case podReady(&p):
			ready++
		case crashLoopBackOff(p):
			backingOff++
		}
	}
	if ready == 0 || ready+backingOff != 2 {
		return fmt.Errorf("%w (%d in crash-loop back-off)", notReady, backingOff)
	}
	return nil
}

// crashLoopBackOff reports whether kubelet waits to restart a container of
// the pod after it exited.
func crashLoopBackOff(p corev1.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff" {
			return true
		}
	}
	return false
}

// nodeConditions lists every node's Ready condition.
func nodeConditions() string {
	var nodes corev1.NodeList
	if err := cluster.CP.Client.List(context.Background(), &nodes); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				fmt.Fprintf(&b, "%s Ready=%s (%s) since %s\n", n.Name, c.Status, c.Reason, c.LastTransitionTime.Format("15:04:05"))
			}
		}
	}
	return b.String()
}
