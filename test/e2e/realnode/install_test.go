package realnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/harness"
)

// TestInstall (scenario 1): the chart's pods run Ready on real kubelets, a
// resource whose pods run on every node converges, `kubectl get swh` shows
// its counts, and requests from every node reach every pod.
func TestInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ds appsv1.DaemonSet
	if err := cluster.CP.Client.Get(ctx, types.NamespacedName{Namespace: realnode.ChartNamespace, Name: "swh-agent"}, &ds); err != nil {
		t.Fatal(err)
	}
	if ds.Status.NumberReady != int32(len(cluster.Nodes)) || ds.Status.DesiredNumberScheduled != int32(len(cluster.Nodes)) {
		t.Fatalf("agent DaemonSet: %d ready of %d desired, want one per node (%d)", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, len(cluster.Nodes))
	}
	var dep appsv1.Deployment
	if err := cluster.CP.Client.Get(ctx, types.NamespacedName{Namespace: realnode.ChartNamespace, Name: "swh-controller"}, &dep); err != nil {
		t.Fatal(err)
	}
	if dep.Status.ReadyReplicas != 2 {
		t.Fatalf("controller Deployment: %d ready replicas, want 2", dep.Status.ReadyReplicas)
	}
	t.Logf("helm install --wait took %s", chartInstalled.Round(100*time.Millisecond))

	// Installed from the registry: the chart pulled from it pins the images
	// pushed with it, which the nodes pulled (they were not imported).
	for _, spec := range []struct {
		name     string
		template corev1.PodTemplateSpec
	}{{"swh-controller", dep.Spec.Template}, {"swh-agent", ds.Spec.Template}} {
		image := spec.template.Spec.Containers[0].Image
		if !strings.HasPrefix(image, realnode.RegistryRepo+"/"+spec.name+"@sha256:") {
			t.Errorf("%s runs %s, want %s/%s@sha256:… (the chart from the registry pins the pushed digest)", spec.name, image, realnode.RegistryRepo, spec.name)
		}
		pods := &corev1.PodList{}
		if err := cluster.CP.Client.List(ctx, pods, client.InNamespace(realnode.ChartNamespace), client.MatchingLabels(spec.template.Labels)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if !strings.HasPrefix(cs.ImageID, realnode.RegistryRepo+"/"+spec.name+"@sha256:") {
					t.Errorf("pod %s runs image %s, want one pulled from %s", p.Name, cs.ImageID, realnode.RegistryRepo)
				}
			}
		}
	}

	ns := testNamespace(t)
	if err := cluster.CP.Client.Create(ctx, workload(ns, "web", 3)); err != nil {
		t.Fatal(err)
	}
	pods := waitAvailable(ctx, t, ns, "web", 3)
	start := time.Now()
	svc := resource(ctx, t, ns, "web", "web")
	waitReadyPods(ctx, t, ns, "web", pods)
	converged := time.Since(start)

	// The status follows the slices (the controller counts them).
	var row map[string]string
	harness.Eventually(t, convergeTimeout, "kubectl get swh showing 3/3", func() error {
		row = tableRow(ctx, t, ns, "web")
		if row["Ready"] != "3/3" || row["Cluster-IP"] != svc.Spec.ClusterIP || row["Ports"] != "80/TCP" {
			return fmt.Errorf("kubectl get swh shows %v, want Ready 3/3, Cluster-IP %s, Ports 80/TCP", row, svc.Spec.ClusterIP)
		}
		return nil
	})

	ls := startLoops(ctx, fmt.Sprintf("http://%s/", svc.Spec.ClusterIP))
	time.Sleep(3 * time.Second)
	tally := ls.stop()
	if !tally.LandsOnly(podNames(pods)...) || len(tally.Landed) != 3 {
		t.Fatalf("requests from every node: %s, want every one answered, by all of %v", tally, podNames(pods))
	}
	report(t, "1 install", tally, "converged "+converged.Round(10*time.Millisecond).String()+" after create", "kubectl get swh: "+fmt.Sprint(row))
}

// tableRow returns the printer columns of one resource, as kubectl get
// shows them (the server renders the Table).
func tableRow(ctx context.Context, t testing.TB, ns, name string) map[string]string {
	t.Helper()
	cfg := rest.CopyConfig(cluster.CP.Config)
	cfg.GroupVersion = &swhv1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = nil
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/namespaces/%s/servicewithhealthchecks/%s", strings.TrimSuffix(cfg.Host, "/"), swhv1alpha1.GroupVersion, ns, name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("the Table of %s from %s: %v (%d rows, status %d): %s", name, url, err, len(table.Rows), resp.StatusCode, body)
	}
	row := map[string]string{}
	for i, col := range table.ColumnDefinitions {
		row[col.Name] = fmt.Sprint(table.Rows[0].Cells[i])
	}
	return row
}
