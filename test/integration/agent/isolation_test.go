package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	agentapp "github.com/swh-dev/swh/agent/app"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// TestNoisyNamespaceLeavesOthersTheirProbes: one tenant's pod, selected by
// four resources of 32 HTTP probes each, against a server that accepts and
// never answers, with timeouts as long as their period, holds at most its
// namespace's share of the node's probe slots (here 2 of 8): another
// namespace's pod is published on its first probes, and withdrawn when its
// server stops, while the noisy probes still hang.
func TestNoisyNamespaceLeavesOthersTheirProbes(t *testing.T) {
	const slots = 8
	startAgentWith(t, nodeA, func(o *agentapp.Options) { o.Publisher.MaxConcurrentProbes = slots })
	ctx := context.Background()

	noisyNS := namespace(t)
	noisy := startBackend(t, noisyNS, "noisy", "noisy-a", nodeA)
	hanging := fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(2525)) // the TCP server reads and never answers
	hanging.TimeoutSeconds = 5
	probes := make([]swhv1alpha1.Probe, 32)
	for i := range probes {
		probes[i] = hanging
	}
	for i := range 4 {
		swh := resource(noisyNS, fmt.Sprint("noisy-", i), webAndSMTP, probes...)
		swh.Spec.Selector = map[string]string{"app": "noisy"}
		swh.Spec.Healthcheck.PeriodSeconds = 5
		if err := controlPlane.Client.Create(ctx, swh); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 30*time.Second, "the noisy probes to hang", func() error {
		if n := noisy.smtp.Accepted(); n < 2 {
			return fmt.Errorf("%d noisy probes connected", n)
		}
		return nil
	})

	quietNS := namespace(t)
	quiet := startBackend(t, quietNS, "quiet", "quiet-a", nodeA)
	created := time.Now()
	if err := controlPlane.Client.Create(ctx, resource(quietNS, "quiet", webAndSMTP, fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525)))); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, quietNS, "quiet", map[string]string{"quiet-smtp-node-a": "quiet-a:TTF", "quiet-web-node-a": "quiet-a:TTF"})
	published := time.Since(created)
	if err := quiet.smtp.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitPublished(t, quietNS, "quiet", map[string]string{"quiet-smtp-node-a": "quiet-a:FFF", "quiet-web-node-a": "quiet-a:TTF"})
	t.Logf("figure: beside 128 hanging probes of another namespace (%d slots, 2 per namespace; %d noisy connections so far), the quiet pod was published %v after its resource was created and withdrawn %v after its server stopped (period 1s)",
		slots, noisy.smtp.Accepted(), published.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
}
