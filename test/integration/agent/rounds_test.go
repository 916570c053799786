package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	agentapp "github.com/swh-dev/swh/agent/app"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// TestRoundEndsTheWindow: with a 5 s coalescing window, a failure of one
// of a resource's three pods is written once the round's three results
// are in, not 5 s later; all three failing at once is still one write.
func TestRoundEndsTheWindow(t *testing.T) {
	a := startAgentWith(t, nodeA, func(o *agentapp.Options) { o.Publisher.Coalesce = 5 * time.Second })
	ns := namespace(t)
	var backends []*backend
	for i := range 3 {
		backends = append(backends, startBackend(t, ns, "rounds", fmt.Sprintf("rounds-%d", i), nodeA))
	}
	if err := controlPlane.Client.Create(context.Background(), resource(ns, "rounds", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{"rounds-web-node-a": "rounds-0:TTF,rounds-1:TTF,rounds-2:TTF"}
	waitPublished(t, ns, "rounds", all)

	failed := time.Now()
	backends[0].http.SetStatus(http.StatusServiceUnavailable)
	waitPublished(t, ns, "rounds", map[string]string{"rounds-web-node-a": "rounds-0:FFF,rounds-1:TTF,rounds-2:TTF"})
	took := time.Since(failed)
	// A period to the probe's turn, then the round: well under the window.
	if took >= 3*time.Second {
		t.Errorf("withdrawn %s after the failure: the 5 s window was waited out", took)
	}
	backends[0].http.SetStatus(http.StatusOK)
	waitPublished(t, ns, "rounds", all)
	time.Sleep(6 * time.Second) // any delayed reconcile of the window has run

	before := a.sliceWrites(t)
	for _, b := range backends {
		b.http.SetStatus(http.StatusServiceUnavailable)
	}
	waitPublished(t, ns, "rounds", map[string]string{"rounds-web-node-a": "rounds-0:FFF,rounds-1:FFF,rounds-2:FFF"})
	time.Sleep(6 * time.Second)
	if writes := a.sliceWrites(t) - before; writes != 1 {
		t.Errorf("three pods failing in one round cost %v slice writes, want 1", writes)
	}
	t.Logf("with a 5 s window, one pod's failure written %s after it (period 1 s)", took.Round(time.Millisecond))
}
