package realnode_test

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
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/harness"
)

// TestUninstallHandsBack (scenario 9): helm uninstall under traffic. The
// chart's pre-delete hook gives the resource's Service back to Kubernetes
// (its selector, no owner, no swh label), kube-controller-manager publishes
// the pods, the agents' slices and registry go, then swh goes: no request
// fails, before, during or after. Then swh is installed again and takes
// the Service back by adoption, so the suite goes on as before.
func TestUninstallHandsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := serve(ctx, t, workload(testNamespace(t), "web", 3))
	key := types.NamespacedName{Namespace: s.ns, Name: s.name}
	ls := startLoops(ctx, s.url)
	time.Sleep(time.Second)
	start := time.Now()
	out, err := cluster.Helm(ctx, "uninstall", realnode.ChartRelease, "--namespace", realnode.ChartNamespace, "--wait", "--timeout", "5m")
	took := time.Since(start)
	// Reinstalled whatever happens, so that the suite's other tests have
	// their swh.
	t.Cleanup(func() { reinstall(t, key) })
	if err != nil {
		ls.stop()
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	time.Sleep(3 * time.Second) // traffic after swh is gone too
	tally := ls.stop()

	svc := &corev1.Service{}
	if err := cluster.CP.Client.Get(ctx, key, svc); err != nil {
		t.Fatalf("the Service is gone: %v", err)
	}
	if svc.Spec.Selector["app"] != s.name || len(svc.OwnerReferences) != 0 || svc.Labels[swhv1alpha1.LabelService] != "" || svc.Spec.ClusterIP != s.svc.Spec.ClusterIP {
		t.Errorf("Service after the uninstall: selector %v, owners %v, labels %v, cluster IP %s; want the pods' selector, no owner, no swh label, the same IP %s",
			svc.Spec.Selector, svc.OwnerReferences, svc.Labels, svc.Spec.ClusterIP, s.svc.Spec.ClusterIP)
	}
	var slices discoveryv1.EndpointSliceList
	if err := cluster.CP.Client.List(ctx, &slices, client.InNamespace(s.ns), client.MatchingLabels{discoveryv1.LabelServiceName: s.name}); err != nil {
		t.Fatal(err)
	}
	builtin := 0
	for _, sl := range slices.Items {
		switch sl.Labels[discoveryv1.LabelManagedBy] {
		case endpoints.DefaultManagedBy:
			t.Errorf("the agents' slice %s is still there", sl.Name)
		case "endpointslice-controller.k8s.io":
			builtin++
		}
	}
	if builtin == 0 {
		t.Error("no slice of kube-controller-manager's for the Service")
	}
	var registry corev1.ConfigMapList
	if err := cluster.CP.Client.List(ctx, &registry, client.MatchingLabels{"app.kubernetes.io/managed-by": "swh-controller"}); err != nil {
		t.Fatal(err)
	}
	if len(registry.Items) > 0 {
		t.Errorf("the agents' registry is left: %s/%s", registry.Items[0].Namespace, registry.Items[0].Name)
	}
	if tally.Failed > 0 || tally.Total == 0 {
		t.Errorf("requests through the uninstall: %s", tally)
	}
	report(t, "9 uninstall", tally, "helm uninstall (the hand-back included) took "+took.Round(100*time.Millisecond).String())
}

// reinstall installs the chart again and has it adopt the Service of key
// back, waiting until the agents publish it.
func reinstall(t *testing.T, key types.NamespacedName) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := cluster.InstallChart(ctx, false, "controller.replicas=2"); err != nil {
		t.Fatalf("installing the chart again: %v\n%s", err, out)
	}
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := cluster.CP.Client.Get(ctx, key, swh); err != nil {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, swhv1alpha1.AnnotationAdopt)))
	if err := cluster.CP.Client.Patch(ctx, swh, patch); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 2*time.Minute, "the Service adopted again and published by the agents", func() error {
		if err := cluster.CP.Client.Get(ctx, key, swh); err != nil {
			return err
		}
		svc := &corev1.Service{}
		if err := cluster.CP.Client.Get(ctx, key, svc); err != nil {
			return err
		}
		if len(svc.Spec.Selector) > 0 || !metav1.IsControlledBy(svc, swh) {
			return fmt.Errorf("selector %v, owners %v", svc.Spec.Selector, svc.OwnerReferences)
		}
		var slices discoveryv1.EndpointSliceList
		if err := cluster.CP.Client.List(ctx, &slices, client.InNamespace(key.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: key.Name}); err != nil {
			return err
		}
		ready := 0
		for _, sl := range slices.Items {
			if sl.Labels[discoveryv1.LabelManagedBy] != endpoints.DefaultManagedBy {
				return fmt.Errorf("slice %s of %s is still there", sl.Name, sl.Labels[discoveryv1.LabelManagedBy])
			}
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		if ready != 3 {
			return fmt.Errorf("%d ready endpoints in the agents' slices, want 3", ready)
		}
		return nil
	})
	if t.Failed() {
		t.Logf("resource %s: %+v", key, swh.Status.Conditions)
		t.Log(strings.TrimSpace(cluster.PodLogs(realnode.ChartNamespace, "swh-controller-", 80)))
	}
}
