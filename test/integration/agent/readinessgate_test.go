package agent_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// startGatedBackend is startBackend for a pod that declares the readiness
// gates of the named resources; notReady leaves its ContainersReady and
// Ready conditions False.
func startGatedBackend(t testing.TB, ns, app, name string, notReady bool, gates ...string) *backend {
	t.Helper()
	opts := harness.PodOptions{Namespace: ns, Name: name, Node: nodeA, Labels: map[string]string{"app": app}, NotReady: notReady}
	for _, g := range gates {
		opts.ReadinessGates = append(opts.ReadinessGates, corev1.PodConditionType(swhv1alpha1.ReadinessGateConditionType(g)))
	}
	return startBackendPod(t, opts)
}

// gateState reads the pod's condition of the resource's gate as
// "status/reason: message", "" when it has none.
func gateState(ctx context.Context, ns, pod, resource string) (string, error) {
	p := &corev1.Pod{}
	if err := controlPlane.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod}, p); err != nil {
		return "", err
	}
	for _, c := range p.Status.Conditions {
		if string(c.Type) == swhv1alpha1.ReadinessGateConditionType(resource) {
			return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message), nil
		}
	}
	return "", nil
}

// waitGate waits until the pod's gate condition starts with want.
func waitGate(t *testing.T, ns, pod, resource, want string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, "condition "+swhv1alpha1.ReadinessGateConditionType(resource)+" of "+pod, func() error {
		got, err := gateState(context.Background(), ns, pod, resource)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(got, want) {
			return fmt.Errorf("\n got %q\nwant %q...", got, want)
		}
		return nil
	})
}

// keepGate checks the pod's gate condition every 20 ms for d and fails on
// any value that does not start with want.
func keepGate(t *testing.T, ns, pod, resource, want string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		got, err := gateState(context.Background(), ns, pod, resource)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got, want) {
			t.Fatalf("condition %s of %s: %q, want it to stay %q...", swhv1alpha1.ReadinessGateConditionType(resource), pod, got, want)
		}
	}
}

// setContainersReady sets the pod's ContainersReady condition alone, with
// a strategic merge patch, as kubelet changes one condition without
// touching the others (Ready stays False: it waits for the gate).
func setContainersReady(t *testing.T, ns, pod string, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": corev1.ContainersReady, "status": status, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}
	if err := controlPlane.Client.Status().Patch(context.Background(), p, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// gateWrites sums the agent's readiness gate writes.
func (a *agent) gateWrites(t testing.TB) float64 {
	families, err := a.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == "swh_agent_readiness_gate_writes_total" {
			for _, m := range f.GetMetric() {
				total += counterValue(m)
			}
		}
	}
	return total
}

// gatedResource is mail with both ports probed: web by HTTP on 8080, smtp
// by TCP on 2525, in the given gate mode ("" leaves it unset: Once).
func gatedResource(ns, name string, mode swhv1alpha1.ReadinessGateMode) *swhv1alpha1.ServiceWithHealthchecks {
	swh := resource(ns, name, webAndSMTP,
		fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)),
		fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525)))
	if mode != "" {
		swh.Spec.ReadinessGate = &swhv1alpha1.ReadinessGate{Mode: mode}
	}
	return swh
}

// TestReadinessGateModes: a pod declaring the gate is held False while a
// probed port fails and set True once every port passes; when a port
// fails again, Once keeps it True (the slices withdraw that port only) and
// Continuous sets it False, naming the port.
func TestReadinessGateModes(t *testing.T) {
	for _, tc := range []struct {
		mode swhv1alpha1.ReadinessGateMode
		// passed is the condition once every port passes; failedAgain
		// after web fails again.
		passed, failedAgain string
	}{{
		mode:        "", // unset: Once
		passed:      "True/ProbesPassedOnce: ",
		failedAgain: "True/ProbesPassedOnce: ",
	}, {
		mode:        swhv1alpha1.ReadinessGateOnce,
		passed:      "True/ProbesPassedOnce: ",
		failedAgain: "True/ProbesPassedOnce: ",
	}, {
		mode:        swhv1alpha1.ReadinessGateContinuous,
		passed:      "True/ProbesPassed: passes the probes of every port",
		failedAgain: "False/ProbesNotPassed: probes not passing on port web",
	}} {
		t.Run(cmp.Or(string(tc.mode), "unset"), func(t *testing.T) {
			a := startAgent(t, nodeA)
			ns := namespace(t)
			b := startGatedBackend(t, ns, "mail", "mail-a", false, "mail")
			b.http.SetStatus(http.StatusServiceUnavailable)
			if err := controlPlane.Client.Create(context.Background(), gatedResource(ns, "mail", tc.mode)); err != nil {
				t.Fatal(err)
			}
			waitPublished(t, ns, "mail", map[string]string{"mail-smtp-node-a": "mail-a:TTF", "mail-web-node-a": "mail-a:FFF"})
			waitGate(t, ns, "mail-a", "mail", "False/ProbesNotPassed: probes not passing on port web")

			b.http.SetStatus(http.StatusOK)
			waitGate(t, ns, "mail-a", "mail", tc.passed)
			waitPublished(t, ns, "mail", map[string]string{"mail-smtp-node-a": "mail-a:TTF", "mail-web-node-a": "mail-a:TTF"})
			// Only changes are written: three more periods of passing probes cost nothing.
			writes := a.gateWrites(t)
			if writes < 2 {
				t.Errorf("%v readiness gate writes counted, want at least 2 (False, then True)", writes)
			}
			time.Sleep(3 * time.Second)
			if got := a.gateWrites(t); got != writes {
				t.Errorf("%v readiness gate writes while nothing changed", got-writes)
			}

			b.http.SetStatus(http.StatusServiceUnavailable)
			// The slices withdraw web alone, whatever the mode.
			waitPublished(t, ns, "mail", map[string]string{"mail-smtp-node-a": "mail-a:TTF", "mail-web-node-a": "mail-a:FFF"})
			waitGate(t, ns, "mail-a", "mail", tc.failedAgain)
			keepGate(t, ns, "mail-a", "mail", tc.failedAgain, 2*time.Second)

			// Both ports failing: named in the order of spec.ports.
			if tc.mode == swhv1alpha1.ReadinessGateContinuous {
				if err := b.smtp.Stop(); err != nil {
					t.Fatal(err)
				}
				waitGate(t, ns, "mail-a", "mail", "False/ProbesNotPassed: probes not passing on ports web, smtp")
			}
		})
	}
}

// TestReadinessGateOnlyWhereDeclared: the agent writes the condition only
// on pods that declare the gate of that resource; a port no probe gates
// counts once the pod's containers are ready, although the pod is not
// Ready (it waits for the gate).
func TestReadinessGateOnlyWhereDeclared(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	// smtp has no probe: it follows readiness.
	swh := resource(ns, "mail", webAndSMTP, fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	startGatedBackend(t, ns, "mail", "gated", true, "mail")
	plain := startGatedBackend(t, ns, "mail", "plain", false)
	other := startGatedBackend(t, ns, "mail", "other", false, "other-resource")
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "mail", map[string]string{
		"mail-smtp-node-a": "gated:FFF,other:TTF,plain:TTF",
		"mail-web-node-a":  "gated:TTF,other:TTF,plain:TTF",
	})
	waitGate(t, ns, "gated", "mail", "False/ProbesNotPassed: probes not passing on port smtp")
	setContainersReady(t, ns, "gated", true)
	waitGate(t, ns, "gated", "mail", "True/ProbesPassedOnce: ")
	// kubelet's conditions are as it left them: the patch sets one condition.
	p := &corev1.Pod{}
	if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "gated"}, p); err != nil {
		t.Fatal(err)
	}
	var kubelets []string
	for _, c := range p.Status.Conditions {
		if !strings.HasPrefix(string(c.Type), swhv1alpha1.ReadinessGatePrefix) {
			kubelets = append(kubelets, fmt.Sprintf("%s=%s", c.Type, c.Status))
		}
	}
	if got, want := strings.Join(kubelets, ","), "PodScheduled=True,Initialized=True,ContainersReady=True,Ready=False"; got != want {
		t.Errorf("kubelet's conditions after the gate's writes: %s, want %s", got, want)
	}
	for _, pod := range []*backend{plain, other} {
		p := &corev1.Pod{}
		if err := controlPlane.Client.Get(context.Background(), client.ObjectKeyFromObject(pod.pod), p); err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if strings.HasPrefix(string(c.Type), swhv1alpha1.ReadinessGatePrefix) {
				t.Errorf("pod %s, which does not declare the gate of mail, got condition %s=%s (%s)", p.Name, c.Type, c.Status, c.Message)
			}
		}
	}
}

// TestReadinessGateOnceSurvivesRestart: a Once condition is True for good,
// also for an agent that starts while the pod fails its probes.
func TestReadinessGateOnceSurvivesRestart(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	b := startGatedBackend(t, ns, "mail", "mail-a", false, "mail")
	swh := gatedResource(ns, "mail", swhv1alpha1.ReadinessGateOnce)
	swh.Spec.Healthcheck.Probes[0] = patient(swh.Spec.Healthcheck.Probes[0])
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitGate(t, ns, "mail-a", "mail", "True/ProbesPassedOnce: ")
	a.Stop()
	b.http.SetStatus(http.StatusServiceUnavailable)
	a = startAgent(t, nodeA)
	// The new agent starts web passing (it is published so) and withdraws
	// it after three failures; the condition stays.
	waitPublished(t, ns, "mail", map[string]string{"mail-smtp-node-a": "mail-a:TTF", "mail-web-node-a": "mail-a:FFF"})
	keepGate(t, ns, "mail-a", "mail", "True/ProbesPassedOnce: ", 2*time.Second)
	if n := a.gateWrites(t); n != 0 {
		t.Errorf("the restarted agent wrote the condition %v times", n)
	}
}
