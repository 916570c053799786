package realnode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	for _, p := range pods {
		resp, err := http.Get(fmt.Sprintf("http://%s:8080/", p.Status.PodIP))
		if err != nil {
			t.Fatalf("GET from %s (%s on %s): %v", p.Name, p.Status.PodIP, p.Spec.NodeName, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		t.Logf("%s on %s at %s answered %d %q", p.Name, p.Spec.NodeName, p.Status.PodIP, resp.StatusCode, body)
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

// testNamespace creates a namespace for the test and deletes it after: the
// namespace controller removes what the test made, and kubelet stops its
// pods.
func testNamespace(t testing.TB) string {
	t.Helper()
	ns := cluster.CP.TestNamespace(t)
	t.Cleanup(func() {
		_ = cluster.CP.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	return ns
}
