package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/swh-dev/swh/test/harness"
)

// TestChartVariants renders the chart with its optional parts on (host
// network, one replica, the ServiceMonitor) through bin/helm and applies the
// result with a server-side dry-run, like the default manifests. The
// ServiceMonitor's CRD is not installed: the test checks instead that it
// selects both metrics Services and their port. Needs bin/helm.
func TestChartVariants(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		harness.Unavailable(t, fmt.Errorf("bin/helm (hack/build-tools.sh helm, run by make test and make verify, builds it): %w", harness.ErrMissingDependency))
	}
	const ns = "swh-variant"
	cmd := exec.Command(helm, "template", "other", filepath.Join(root, "deploy", "charts", "swh"),
		"--namespace", ns, "--set", "createNamespace=true,agent.hostNetwork=true,controller.replicas=1,serviceMonitor.enabled=true,serviceMonitor.labels.release=prom")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	path := filepath.Join(t.TempDir(), "variant.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := readManifests(path)
	if err != nil {
		t.Fatal(err)
	}

	if n := len(ofKind(objs, "PodDisruptionBudget")); n != 0 {
		t.Errorf("%d PodDisruptionBudgets with one replica; it would block every drain", n)
	}
	nsObj := find(t, objs, "Namespace", ns)
	if got := nsObj.GetLabels()["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("the Namespace enforces %q with agent.hostNetwork, want privileged", got)
	}
	ds := find(t, objs, "DaemonSet", "other-swh-agent")
	if host, _, _ := unstructured.NestedBool(ds.Object, "spec", "template", "spec", "hostNetwork"); !host {
		t.Error("agent.hostNetwork=true did not put the agent in the host network")
	}

	// The ServiceMonitor selects both metrics Services, in their namespace, by their port name.
	sm := find(t, objs, "ServiceMonitor", "other-swh")
	if sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", sm.GetLabels())
	}
	match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	selected := 0
	for _, svc := range ofKind(objs, "Service") {
		if labels.SelectorFromSet(match).Matches(labels.Set(svc.GetLabels())) {
			selected++
		}
	}
	if selected != 2 {
		t.Errorf("the ServiceMonitor selects %d Services, want the 2 metrics Services", selected)
	}
	namespaces, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(namespaces) != 1 || namespaces[0] != ns || len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "metrics" {
		t.Errorf("ServiceMonitor namespaces %v, endpoints %v: want %s and the metrics port", namespaces, endpoints, ns)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, w := warningClient(t)
	var others []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "ServiceMonitor" {
			others = append(others, o)
		}
	}
	if err := apply(ctx, c, ofKind(objs, "Namespace", "CustomResourceDefinition"), false); err != nil {
		t.Fatalf("applying the Namespace: %v", err)
	}
	if err := apply(ctx, c, others, true); err != nil {
		t.Fatalf("server-side dry-run:\n%v", err)
	}
	if len(w.seen) > 0 {
		t.Errorf("the API server warned:\n%s", strings.Join(w.seen, "\n"))
	}
}
