package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// restartAgent stops a and starts a new agent for its node, then lets
// several probe periods pass: enough for successThreshold or
// failureThreshold (3) results to undo a wrong start state.
func restartAgent(t *testing.T, a *agent) *agent {
	t.Helper()
	a.Stop()
	time.Sleep(200 * time.Millisecond)
	a = startAgent(t, a.node)
	time.Sleep(4 * time.Second)
	return a
}

// patient makes a wrong start state visible: three results to flip.
func patient(p swhv1alpha1.Probe) swhv1alpha1.Probe {
	p.SuccessThreshold, p.FailureThreshold = 3, 3
	return p
}

// splitResource has port web gated by a failing HTTP probe on 8080 and
// port smtp gated only by a passing pod-wide TCP probe on 8081 (a port the
// resource does not expose, so it gates every port).
func splitResource(t *testing.T, ns, name, pod string) (*swhv1alpha1.ServiceWithHealthchecks, map[string]string) {
	t.Helper()
	b := startBackend(t, ns, name, pod, nodeA)
	b.http.SetStatus(http.StatusServiceUnavailable)
	health, err := harness.StartTCPServer(b.ip + ":8081")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = health.Stop() })
	swh := resource(ns, name, webAndSMTP,
		patient(fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))),
		patient(fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(8081))))
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	return swh, map[string]string{name + "-smtp-node-a": pod + ":TTF", name + "-web-node-a": pod + ":FFF"}
}

// TestRestartKeepsAPortPassedByAPodWideProbe: a port gated only by a
// passing pod-wide probe stays ready across restarts although another port
// of the pod fails its own probe (the pod-wide probe must not be judged by
// the other port).
func TestRestartKeepsAPortPassedByAPodWideProbe(t *testing.T) {
	ns := namespace(t)
	_, want := splitResource(t, ns, "split", "split-a")
	a := startAgent(t, nodeA)
	waitPublished(t, ns, "split", want)
	w := watchSteady(ns, "split", want)
	for range 2 {
		a = restartAgent(t, a)
	}
	w.check(t, "across 2 agent restarts")
}

// TestEditingAPodWideProbeKeepsItsPorts: editing a probe restarts its
// targets; the port it alone gates must keep its traffic.
func TestEditingAPodWideProbeKeepsItsPorts(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	swh, want := splitResource(t, ns, "edit", "edit-a")
	waitPublished(t, ns, "edit", want)
	w := watchSteady(ns, "edit", want)
	for _, threshold := range []int32{4, 3} {
		// The controller writes the status meanwhile: retry on conflicts.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			current := &swhv1alpha1.ServiceWithHealthchecks{}
			if err := controlPlane.Client.Get(context.Background(), client.ObjectKeyFromObject(swh), current); err != nil {
				return err
			}
			current.Spec.Healthcheck.Probes[1].FailureThreshold = threshold
			return controlPlane.Client.Update(context.Background(), current)
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
	}
	w.check(t, "across 2 edits of the pod-wide probe")
}

// TestRestartKeepsATerminatingPodServing: a terminating pod that passes its
// probes is published not ready but serving (kube-proxy's fallback when no
// endpoint is ready); a restart must not take serving away.
func TestRestartKeepsATerminatingPodServing(t *testing.T) {
	ns := namespace(t)
	startBackend(t, ns, "dying", "dying-a", nodeA)
	swh := resource(ns, "dying", webAndSMTP[:1], patient(fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(8080))))
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, nodeA)
	waitPublished(t, ns, "dying", map[string]string{"dying-web-node-a": "dying-a:TTF"})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dying-a"}}
	// Graceful: no kubelet confirms it, so the pod stays terminating.
	if err := controlPlane.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(300)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"dying-web-node-a": "dying-a:FTT"}
	waitPublished(t, ns, "dying", want)
	w := watchSteady(ns, "dying", want)
	for range 2 {
		a = restartAgent(t, a)
	}
	w.check(t, "across 2 agent restarts")
}

// TestRestartKeepsAFailingPodNotServing: with publishNotReadyAddresses a
// failing pod is published ready (every pod is) but not serving; a restart
// must not make it serving until failureThreshold failures.
func TestRestartKeepsAFailingPodNotServing(t *testing.T) {
	ns := namespace(t)
	b := startBackend(t, ns, "pnra", "pnra-a", nodeA)
	b.http.SetStatus(http.StatusServiceUnavailable)
	swh := resource(ns, "pnra", webAndSMTP[:1], patient(fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))))
	swh.Spec.PublishNotReadyAddresses = true
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, nodeA)
	want := map[string]string{"pnra-web-node-a": "pnra-a:TFF"}
	waitPublished(t, ns, "pnra", want)
	w := watchSteady(ns, "pnra", want)
	for range 2 {
		a = restartAgent(t, a)
	}
	w.check(t, "across 2 agent restarts")
}

// TestAdoptionStartsFromTheBuiltInSlices: when a resource adopts a Service,
// the agent's first slice carries the readiness the built-in controller
// published, not a not-ready start (kube-proxy could pick our copy of the
// address over the built-in one).
func TestAdoptionStartsFromTheBuiltInSlices(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	b := startBackend(t, ns, "adopt", "adopt-a", nodeA)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "adopt"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "adopt"},
			Ports:    []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if err := controlPlane.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	ready := true
	builtin := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "adopt-x7k2p", Labels: map[string]string{
			discoveryv1.LabelServiceName: "adopt",
			discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{b.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "adopt-a", UID: b.pod.UID},
			NodeName:   new(nodeA),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: new("web"), Port: new(int32(8080))}},
	}
	if err := controlPlane.Client.Create(ctx, builtin); err != nil {
		t.Fatal(err)
	}
	// Ours must never show the pod other than ready; the built-in slice may
	// go at any time.
	w := watchSlices(ns, "adopt", func(got map[string]string) bool {
		eps, ok := got["adopt-web-node-a"]
		return !ok || eps == "adopt-a:TTF"
	})
	startAgent(t, nodeA)
	swh := resource(ns, "adopt", []swhv1alpha1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		patient(fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(8080))))
	swh.Annotations = map[string]string{"network.swh.dev/adopt": "true"}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the agent publishes the adopted Service", func() error {
		got, _, err := published(ctx, ns, "adopt")
		if err != nil || got["adopt-web-node-a"] == "" {
			return fmt.Errorf("slices %v (%v)", got, err)
		}
		return nil
	})
	time.Sleep(4 * time.Second)
	w.check(t, "while adopting")
}
