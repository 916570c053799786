package deploy_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/harness"
)

// warnings collects the API server's warnings (Pod Security among them).
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

// warningClient returns an admin client that records the API server's
// warnings in the returned warnings.
func warningClient(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// TestManifestsApplyDryRun applies every object of the plain manifests with
// server-side apply and dryRun=All, after the Namespace (labelled to enforce
// the restricted Pod Security Standard) and the CRD are in place for real,
// and fails on any error or warning: a warning would be Pod Security saying
// the pods would be rejected, or a deprecated API.
func TestManifestsApplyDryRun(t *testing.T) {
	objs := manifests(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, w := warningClient(t)
	first := harness.OfKind(objs, "Namespace", "CustomResourceDefinition")
	if len(first) != 2 {
		t.Fatalf("want the Namespace and the CRD in the manifests, found %d of them", len(first))
	}
	if err := apply(ctx, c, first, false); err != nil {
		t.Fatalf("applying the Namespace and the CRD: %v", err)
	}
	if err := apply(ctx, c, objs, true); err != nil {
		t.Fatalf("server-side dry-run of the manifests:\n%v", err)
	}
	if len(w.seen) > 0 {
		t.Errorf("the API server warned:\n%s", strings.Join(w.seen, "\n"))
	}

	// Every kind an installation needs is there, once per binary where it applies.
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	for kind, want := range map[string]int{
		"CustomResourceDefinition": 1, "Namespace": 1, "ServiceAccount": 2, "ClusterRole": 4, // the binaries', and view/edit aggregation
		"ClusterRoleBinding": 2, "Role": 1, "RoleBinding": 1, "Deployment": 1, "DaemonSet": 1,
		"PodDisruptionBudget": 1, "Service": 3, "ValidatingAdmissionPolicy": 5, "ValidatingAdmissionPolicyBinding": 5,
		"ValidatingWebhookConfiguration": 1, // the eviction guard, its certificate kept by the controller
	} {
		if kinds[kind] != want {
			t.Errorf("%d %s objects in the manifests, want %d", kinds[kind], kind, want)
		}
	}
	if kinds["ServiceMonitor"] != 0 {
		t.Error("the default manifests hold a ServiceMonitor; it needs the Prometheus Operator's CRD and is off by default")
	}
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && ns != namespace {
			t.Errorf("%s %s is in namespace %s, want %s", o.GetKind(), o.GetName(), ns, namespace)
		}
	}
}

// TestManifestsWorkloads checks what production needs of the Deployment
// (replicas, spread, disruption budget, leader election) and the DaemonSet
// (every taint tolerated, node-critical priority, no host network), beyond
// what the API server validates.
func TestManifestsWorkloads(t *testing.T) {
	objs := manifests(t)
	deploy := &appsv1.Deployment{}
	fromUnstructured(t, find(t, objs, "Deployment", controllerSA).Object, deploy)
	ds := &appsv1.DaemonSet{}
	fromUnstructured(t, find(t, objs, "DaemonSet", agentSA).Object, ds)

	if deploy.Spec.Replicas == nil || *deploy.Spec.Replicas != 2 {
		t.Errorf("controller replicas = %v, want 2", deploy.Spec.Replicas)
	}
	ctrlArgs := deploy.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--leader-elect=true", "--leader-election-namespace=" + namespace} {
		if !slices.Contains(ctrlArgs, want) {
			t.Errorf("controller args %v lack %s", ctrlArgs, want)
		}
	}
	pdb := &policyv1.PodDisruptionBudget{}
	fromUnstructured(t, find(t, objs, "PodDisruptionBudget", controllerSA).Object, pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "1" {
		t.Errorf("PodDisruptionBudget minAvailable = %v, want 1", pdb.Spec.MinAvailable)
	}
	if deploy.Spec.Template.Spec.Affinity == nil || deploy.Spec.Template.Spec.Affinity.PodAntiAffinity == nil {
		t.Error("the controller replicas do not spread over nodes (no pod anti-affinity)")
	}

	agent := ds.Spec.Template.Spec
	if !slices.ContainsFunc(agent.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
	}) {
		t.Errorf("agent tolerations %v do not tolerate every taint", agent.Tolerations)
	}
	if agent.PriorityClassName != "system-node-critical" {
		t.Errorf("agent priority class = %q, want system-node-critical", agent.PriorityClassName)
	}
	if agent.HostNetwork {
		t.Error("the agent runs in the host network by default")
	}
	nodeName := false
	for _, env := range agent.Containers[0].Env {
		nodeName = nodeName || (env.Name == "NODE_NAME" && env.ValueFrom != nil && env.ValueFrom.FieldRef != nil &&
			env.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !nodeName {
		t.Error("the agent does not get NODE_NAME from the downward API's spec.nodeName")
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("agent update strategy = %s, want RollingUpdate", ds.Spec.UpdateStrategy.Type)
	}

	for _, w := range []struct {
		name string
		pod  corev1.PodSpec
		sa   string
	}{{"controller", deploy.Spec.Template.Spec, controllerSA}, {"agent", agent, agentSA}} {
		t.Run(w.name, func(t *testing.T) {
			checkHardened(t, w.pod)
			if w.pod.ServiceAccountName != w.sa {
				t.Errorf("service account = %q, want %q", w.pod.ServiceAccountName, w.sa)
			}
			c := w.pod.Containers[0]
			if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Error("no liveness probe on /healthz")
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Error("no readiness probe on /readyz")
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %v: want CPU and memory requests and a memory limit", c.Resources)
			}
			svc := find(t, objs, "Service", w.sa+"-metrics")
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			if len(ports) != 1 || ports[0].(map[string]any)["name"] != "metrics" {
				t.Errorf("metrics Service ports = %v, want one named metrics", ports)
			}
		})
	}
}

// checkHardened fails unless the pod runs as non-root with a read-only
// root filesystem, no privilege escalation, no capabilities and the
// runtime's seccomp profile.
func checkHardened(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod: runAsNonRoot is not true")
	}
	if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("pod: no non-zero runAsUser")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("pod: seccomp profile is not RuntimeDefault")
	}
	if pod.HostPID || pod.HostIPC {
		t.Error("pod: shares the host's PID or IPC namespace")
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s: no security context", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: root filesystem not read-only", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: privilege escalation allowed", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %s: privileged", c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("container %s: capabilities %v, want all dropped and none added", c.Name, sc.Capabilities)
		}
	}
}

func fromUnstructured(t testing.TB, obj map[string]any, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, into); err != nil {
		t.Fatal(err)
	}
}
