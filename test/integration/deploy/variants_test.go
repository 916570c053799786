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
	const ns = "swh-variant"
	objs := renderChart(t, "other", ns, "createNamespace=true,agent.hostNetwork=true,controller.replicas=1,serviceMonitor.enabled=true,serviceMonitor.labels.release=prom")

	if n := len(harness.OfKind(objs, "PodDisruptionBudget")); n != 0 {
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
	// The agent's admission policies name this release's agent, and turn off.
	for _, name := range []string{"other-swh-agent-endpointslices", "other-swh-agent-endpointslice-services", "other-swh-agent-pod-conditions"} {
		policy := find(t, objs, "ValidatingAdmissionPolicy", name)
		find(t, objs, "ValidatingAdmissionPolicyBinding", name)
		conditions, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConditions")
		const agent = "'system:serviceaccount:" + ns + ":other-swh-agent'"
		if len(conditions) != 1 || !strings.Contains(fmt.Sprint(conditions[0].(map[string]any)["expression"]), agent) {
			t.Errorf("ValidatingAdmissionPolicy %s matches %v, want only the user %s", name, conditions, agent)
		}
	}
	if off := renderChart(t, "other", ns, "agent.admissionPolicy.enabled=false"); len(harness.OfKind(off, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")) != 0 {
		t.Error("agent.admissionPolicy.enabled=false still renders admission policies")
	}

	// The ServiceMonitor selects both metrics Services, in their namespace, by their port name.
	sm := find(t, objs, "ServiceMonitor", "other-swh")
	if sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", sm.GetLabels())
	}
	match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	selected := 0
	for _, svc := range harness.OfKind(objs, "Service") {
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
	// Without it, Prometheus renames the gauge's namespace label to
	// exported_namespace and the dashboard merges namespaces.
	if len(endpoints) == 1 && endpoints[0].(map[string]any)["honorLabels"] != true {
		t.Errorf("ServiceMonitor endpoint %v: want honorLabels: true (the resource gauge's namespace label)", endpoints[0])
	}
	// The agents' alerts group by node (docs/alerts.md).
	if len(endpoints) == 1 {
		relabel := fmt.Sprint(endpoints[0].(map[string]any)["relabelings"])
		if !strings.Contains(relabel, "__meta_kubernetes_pod_node_name") || !strings.Contains(relabel, "targetLabel:node") {
			t.Errorf("ServiceMonitor relabelings %s: want the pod's node as the label node", relabel)
		}
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
	if err := apply(ctx, c, harness.OfKind(objs, "Namespace", "CustomResourceDefinition"), false); err != nil {
		t.Fatalf("applying the Namespace: %v", err)
	}
	if err := apply(ctx, c, others, true); err != nil {
		t.Fatalf("server-side dry-run:\n%v", err)
	}
	if len(w.seen) > 0 {
		t.Errorf("the API server warned:\n%s", strings.Join(w.seen, "\n"))
	}
}

// renderChart renders deploy/charts/swh through bin/helm as release in ns,
// with the --set values set (comma-separated, none when empty). Needs
// bin/helm.
func renderChart(t *testing.T, release, ns, set string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := helmTemplate(t, release, ns, set)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helmTemplate runs helm template like renderChart, with more arguments
// (extra), and returns helm's error instead of failing the test.
func helmTemplate(t *testing.T, release, ns, set string, extra ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		harness.Unavailable(t, fmt.Errorf("bin/helm (hack/build-tools.sh helm, run by make test and make verify, builds it): %w", harness.ErrMissingDependency))
	}
	args := []string{"template", release, filepath.Join(root, "deploy", "charts", "swh"), "--namespace", ns}
	if set != "" {
		args = append(args, "--set", set)
	}
	cmd := exec.Command(helm, append(args, extra...)...)
	// helm keeps its caches and configuration out of the user's home.
	home := t.TempDir()
	cmd.Env = append(cmd.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w\n%s", err, stderr.String())
	}
	path := filepath.Join(t.TempDir(), release+".yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := harness.ReadManifests(path)
	if err != nil {
		t.Fatal(err)
	}
	return objs, nil
}
