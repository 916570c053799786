package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/kubectlswh"
	"github.com/swh-dev/swh/test/harness"
)

// operatorKubeconfig writes a kubeconfig of a read-only operator: the
// built-in "view" role, made of the roles aggregated into it (this suite
// runs no aggregation controller, so they are bound directly), the
// chart's included, and reading nodes.
// With namespace set, the operator holds the same roles in that namespace
// only (RoleBindings), and cannot read nodes.
func operatorKubeconfig(t *testing.T, namespace string) string {
	t.Helper()
	ctx := context.Background()
	user := "operator-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + namespace
	path := filepath.Join(t.TempDir(), "operator.kubeconfig")
	if err := controlPlane.WriteUserKubeconfig(path, user); err != nil {
		t.Fatal(err)
	}
	objs, err := harness.ChartManifests()
	if err != nil {
		t.Fatal(err)
	}
	var viewRole string
	for _, o := range harness.OfKind(objs, "ClusterRole") {
		if o.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"] == "true" {
			viewRole = o.GetName()
			if err := harness.ApplyManifests(ctx, controlPlane.Client, "test", []*unstructured.Unstructured{o}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if viewRole == "" {
		t.Fatal("the chart has no ClusterRole aggregated into view")
	}
	// "view" aggregates system:aggregate-to-view and the chart's role.
	roles := []string{"system:aggregate-to-view", viewRole}
	if namespace == "" {
		nodes := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user + "-nodes"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}}}
		if err := controlPlane.Client.Create(ctx, nodes); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), nodes) })
		roles = append(roles, nodes.Name)
	}
	for _, role := range roles {
		meta := metav1.ObjectMeta{Name: user + "-" + role, Namespace: namespace}
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
		subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}
		var b client.Object = &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}
		if namespace != "" {
			b = &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}
		}
		if err := controlPlane.Client.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), b) })
	}
	return path
}

// plugin runs kubectl swh with args and returns its output.
func plugin(t *testing.T, kubeconfig, agentNS string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--kubeconfig", kubeconfig, "--agent-namespace", agentNS)
	err := kubectlswh.Run(context.Background(), args, &out, &errOut)
	if err != nil {
		err = fmt.Errorf("%w (stderr: %s)", err, errOut.String())
	}
	return out.String(), err
}

func pluginStatus(t *testing.T, kubeconfig, agentNS, ns, name string) (kubectlswh.Status, error) {
	var st kubectlswh.Status
	out, err := plugin(t, kubeconfig, agentNS, "status", name, "-n", ns, "-o", "json")
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("parsing %q: %w", out, err)
	}
	return st, nil
}

// endpointOf finds a pod on a port in a status report.
func endpointOf(st kubectlswh.Status, port, pod string) (kubectlswh.EndpointStatus, bool) {
	for _, p := range st.Ports {
		for _, ep := range p.Endpoints {
			if p.Name == port && ep.Pod == pod {
				return ep, true
			}
		}
	}
	return kubectlswh.EndpointStatus{}, false
}

// TestKubectlSwh: with read access alone, the plugin shows which pod is
// out of which port and why (the failing probe and its reason), a pod on a
// node without a running agent as such, endpoints frozen by a stopped
// agent as stale, and a recovered pod without reason within a period.
func TestKubectlSwh(t *testing.T) {
	a := startAgent(t, nodeA) // node-b has no agent running
	ns := namespace(t)
	agentNS := namespace(t)
	ctx := context.Background()
	agentLabels := map[string]string{"app.kubernetes.io/name": "swh", "app.kubernetes.io/component": "agent"}
	if _, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{Namespace: agentNS, Name: "swh-agent-a", Node: nodeA, Labels: agentLabels, IPs: []string{"10.250.0.1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{Namespace: agentNS, Name: "swh-agent-b", Node: nodeB, Labels: agentLabels, IPs: []string{"10.250.0.2"}, NotReady: true}); err != nil {
		t.Fatal(err)
	}
	failing := startBackend(t, ns, "shop", "shop-a", nodeA)
	startBackend(t, ns, "shop", "shop-b", nodeA)
	startBackend(t, ns, "shop", "shop-c", nodeB)
	failing.http.SetStatus(http.StatusServiceUnavailable)
	swh := resource(ns, "shop", webAndSMTP, fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	kubeconfig := operatorKubeconfig(t, "")

	var st kubectlswh.Status
	harness.Eventually(t, 20*time.Second, "shop-a out of web with its probe's reason", func() error {
		var err error
		if st, err = pluginStatus(t, kubeconfig, agentNS, ns, "shop"); err != nil {
			return err
		}
		ep, _ := endpointOf(st, "web", "shop-a")
		if ep.Reason == nil || ep.Reason.Reason != "http-status" {
			return fmt.Errorf("shop-a on web: %+v", ep)
		}
		return nil
	})
	checks := []struct {
		port, pod string
		want      string
		ok        func(kubectlswh.EndpointStatus) bool
	}{
		{"web", "shop-a", "published, not ready, HTTP probe 0 failing with http-status since a known time", func(ep kubectlswh.EndpointStatus) bool {
			r := ep.Reason
			return ep.Published && !ep.Ready && r.Probe != nil && *r.Probe == 0 && r.ProbeName == "HTTP probe on 8080" &&
				strings.Contains(r.Message, "http-status") && r.Since != nil && !ep.Stale
		}},
		{"smtp", "shop-a", "ready: no probe gates smtp", func(ep kubectlswh.EndpointStatus) bool { return ep.Ready && ep.Reason == nil }},
		{"web", "shop-b", "ready", func(ep kubectlswh.EndpointStatus) bool { return ep.Ready && ep.Reason == nil }},
		{"web", "shop-c", "not published: node-b's agent is not running", func(ep kubectlswh.EndpointStatus) bool {
			return !ep.Published && ep.Reason != nil && ep.Reason.Reason == kubectlswh.ReasonNotPublished &&
				strings.Contains(ep.Reason.Message, "agent of node node-b is not running")
		}},
	}
	for _, c := range checks {
		if ep, found := endpointOf(st, c.port, c.pod); !found || !c.ok(ep) {
			t.Errorf("%s on %s: %+v (reason %+v), want %s", c.pod, c.port, ep, ep.Reason, c.want)
		}
	}
	if !strings.HasPrefix(st.Summary, ns+"/shop: 1 of 3 pods ready on every port (port web 1/3, port smtp 2/3)") ||
		!strings.Contains(st.Summary, "node-b") {
		t.Errorf("summary %q", st.Summary)
	}

	text, err := plugin(t, kubeconfig, agentNS, "status", "shop", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl swh status shop:\n%s", text)
	for _, want := range []string{st.Summary, "http-status", "0 (HTTP probe on 8080)", "not published", "node node-b: agent swh-agent-b is not ready"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	why, err := plugin(t, kubeconfig, agentNS, "why", "shop", "shop-a", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl swh why shop shop-a:\n%s", why)
	for _, want := range []string{
		"Pod shop-a is selected by " + ns + "/shop",
		"runs on node node-a, which is Ready",
		"is ready: it probes the pod",
		"Port web → pod port 8080: gated by probe 0 (HTTP probe on 8080)",
		"Port smtp → pod port 2525 (named targetPort \"smtp\" is 2525 on this pod): no probe gates it",
		"Published: not ready, http-status for ",
		"Reason http-status: the HTTP status is not one of expectedStatusCodes.",
	} {
		if !strings.Contains(why, want) {
			t.Errorf("why lacks %q", want)
		}
	}

	// kubectl's output conventions: -o wide, a jsonpath, --no-headers, the
	// list of every resource, why as JSON, and completion of names.
	wide, err := plugin(t, kubeconfig, agentNS, "status", "shop", "-n", ns, "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(wide, "ADDRESSES") || !strings.Contains(wide, "POD-PORT") || !strings.Contains(wide, "8080") {
		t.Errorf("-o wide lacks the addresses and pod ports:\n%s", wide)
	}
	ready, err := plugin(t, kubeconfig, agentNS, "status", "shop", "-n", ns, "-o", `jsonpath={range .ports[*]}{.name}={.ready}{" "}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(ready) != "web=1 smtp=2" {
		t.Errorf("-o jsonpath printed %q, want %q", ready, "web=1 smtp=2")
	}
	rows, err := plugin(t, kubeconfig, agentNS, "status", "shop", "-n", ns, "--no-headers")
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(rows), "\n"); len(lines) != 6 || strings.Contains(rows, "PORT") || strings.Contains(rows, st.Summary) {
		t.Errorf("--no-headers: want the 6 rows (3 pods, 2 ports) only, got:\n%s", rows)
	}
	all, err := plugin(t, kubeconfig, agentNS, "status", "-A")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(all, "NAMESPACE") || !regexp.MustCompile(ns+`\s+shop\s`).MatchString(all) {
		t.Errorf("status -A does not list %s/shop:\n%s", ns, all)
	}
	names, err := plugin(t, kubeconfig, agentNS, "status", "-n", ns, "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(names) != "statuslistentry.kubectl.swh.dev/shop" {
		t.Errorf("status -o name printed %q", names)
	}
	templated, err := plugin(t, kubeconfig, agentNS, "status", "shop", "-n", ns, "--template", "{{.readyPods}}/{{.pods}}")
	if err != nil {
		t.Fatal(err)
	}
	if templated != "1/3" {
		t.Errorf("--template without -o printed %q, want the go-template's 1/3", templated)
	}
	whyJSON, err := plugin(t, kubeconfig, agentNS, "why", "shop", "shop-a", "-n", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var report kubectlswh.WhyReport
	if err := json.Unmarshal([]byte(whyJSON), &report); err != nil || report.Pod != "shop-a" || len(report.Sentences) < 3 ||
		!strings.Contains(whyJSON, `"kind": "Why"`) {
		t.Errorf("why -o json: %v\n%s", err, whyJSON)
	}
	// cobra completes the last argument: the flags go before it.
	var completed, completeErr bytes.Buffer
	if err := kubectlswh.Run(context.Background(), []string{"__complete", "why", "--kubeconfig", kubeconfig, "-n", ns, "shop", ""}, &completed, &completeErr); err != nil {
		t.Fatalf("completion: %v (%s)", err, completeErr.String())
	}
	completion := completed.String()
	if !strings.Contains(completion, "shop-a\n") || !strings.Contains(completion, "shop-c\n") {
		t.Errorf("completing why shop's pod: %q", completion)
	}

	// An operator with view in the resource's namespace only: no nodes,
	// no agent pods. Said so, and nothing is called stale for it.
	local := operatorKubeconfig(t, ns)
	limited, err := pluginStatus(t, local, agentNS, ns, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if ep, _ := endpointOf(limited, "web", "shop-b"); !ep.Ready || ep.Stale ||
		!strings.Contains(limited.Summary, "agents unknown") || !strings.HasPrefix(limited.Nodes[0].Ready, "unreadable") {
		t.Errorf("with view in %s only: summary %q, nodes %+v, shop-b %+v", ns, limited.Summary, limited.Nodes, ep)
	}

	// Recovery: the reason goes with the verdict, in the same write.
	failing.http.SetStatus(http.StatusOK)
	start := time.Now()
	harness.Eventually(t, 10*time.Second, "shop-a ready on web, no reason", func() error {
		st, err := pluginStatus(t, kubeconfig, agentNS, ns, "shop")
		if err != nil {
			return err
		}
		ep, _ := endpointOf(st, "web", "shop-a")
		if ep.Ready && ep.Reason != nil {
			t.Errorf("shop-a ready with a reason left: %+v", ep.Reason)
		}
		if !ep.Ready || ep.Reason != nil {
			return fmt.Errorf("%+v", ep)
		}
		return nil
	})
	t.Logf("reason gone %v after the backend recovered (probe period 1 s)", time.Since(start).Round(10*time.Millisecond))

	// The agent of node-a stops; its pod is no longer Ready.
	a.Stop()
	if err := harness.SetPodReady(ctx, controlPlane.Client, types.NamespacedName{Namespace: agentNS, Name: "swh-agent-a"}, false); err != nil {
		t.Fatal(err)
	}
	st, err = pluginStatus(t, kubeconfig, agentNS, ns, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if ep, _ := endpointOf(st, "web", "shop-b"); !ep.Ready || !ep.Stale {
		t.Errorf("shop-b after its agent stopped: %+v, want ready as last published, stale", ep)
	}
}
