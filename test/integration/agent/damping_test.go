package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	agentapp "github.com/swh-dev/swh/agent/app"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/kubectlswh"
	"github.com/swh-dev/swh/test/harness"
)

// TestFlapDamping: a backend that keeps failing and recovering, beside a
// steady one, stays out longer at each withdrawal with
// spec.healthcheck.flapDamping (base 2 s, at most 4 s), and `kubectl swh
// history` reads its transitions from the agent's memory through the API
// server's pod proxy.
func TestFlapDamping(t *testing.T) {
	ns := namespace(t)
	agentNS := namespace(t)
	ip := harness.PodIP(t)
	const metricsPort = 9090
	startAgentWith(t, nodeA, func(o *agentapp.Options) { o.MetricsAddr, o.ServeHistory = ip+":9090", true })
	ctx := context.Background()
	if _, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{
		Namespace: agentNS, Name: "swh-agent-a", Node: nodeA, IPs: []string{ip},
		Labels: map[string]string{"app.kubernetes.io/name": "swh", "app.kubernetes.io/component": "agent"},
		Ports:  []corev1.ContainerPort{{Name: "metrics", ContainerPort: metricsPort}},
	}); err != nil {
		t.Fatal(err)
	}
	b := startBackend(t, ns, "flappy", "flappy-a", nodeA)
	// A steady pod beside it: damping never keeps a port without one.
	startBackend(t, ns, "flappy", "flappy-b", nodeA)
	swh := resource(ns, "flappy", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	swh.Spec.Healthcheck.FlapDamping = &swhv1alpha1.FlapDamping{BaseEjectionSeconds: 2, MaxEjectionSeconds: 4, StableSeconds: 60}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	in := map[string]string{"flappy-web-node-a": "flappy-a:TTF,flappy-b:TTF"}
	out := map[string]string{"flappy-web-node-a": "flappy-a:FFF,flappy-b:TTF"}
	waitPublished(t, ns, "flappy", in)

	// Three flaps: failing until withdrawn, then passing at once. Back
	// after 2, 4, then 4 s (capped), not after one period.
	var outFor []time.Duration
	for i, least := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
		b.http.SetStatus(http.StatusServiceUnavailable)
		waitPublished(t, ns, "flappy", out)
		withdrawn := time.Now()
		b.http.SetStatus(http.StatusOK)
		waitPublished(t, ns, "flappy", in)
		outFor = append(outFor, time.Since(withdrawn))
		// The ejection counts from the agent's flip, before the watch
		// saw it: allow the watch's lag.
		if outFor[i] < least-300*time.Millisecond {
			t.Errorf("flap %d: back %s after withdrawn, want at least %s", i+1, outFor[i], least)
		}
	}
	t.Logf("a pod passing again at once after each withdrawal stayed out %v (flapDamping base 2 s, at most 4 s; period 1 s)", outFor)

	kubeconfig := controlPlane.Kubeconfig
	var report kubectlswh.HistoryReport
	raw, err := plugin(t, kubeconfig, agentNS, "history", "flappy", "-n", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &report); err != nil {
		t.Fatalf("parsing %q: %v", raw, err)
	}
	if len(report.Targets) != 2 || report.Errors != nil {
		t.Fatalf("history: %s", raw)
	}
	h := report.Targets[0] // flappy-a, sorted by pod
	var events []string
	for _, e := range h.Transitions {
		events = append(events, e.Event)
	}
	if h.Pod != "flappy-a" || h.Node != nodeA || h.Ejections != 3 || !h.Passing ||
		strings.Join(events, ",") != "withdrawn,damped,published,withdrawn,damped,published,withdrawn,damped" && !strings.HasSuffix(strings.Join(events, ","), "withdrawn,damped,published") {
		t.Errorf("history of flappy-a: %s", raw)
	}
	text, err := plugin(t, kubeconfig, agentNS, "history", "flappy", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "withdrawn (http-status)") || !strings.Contains(text, "ejection 3 in a row") {
		t.Errorf("kubectl swh history prints:\n%s", text)
	}
	t.Logf("kubectl swh history:\n%s", text)
}
