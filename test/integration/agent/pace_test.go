package agent_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// pacedResource creates a resource named name with one HTTP probe of
// failureThreshold ft on port web, its period and optional fast and down
// periods, and one backend pod on node A; it waits until the pod passes.
func pacedResource(t *testing.T, ns, name string, period, ft int32, fast, down *int32) *backend {
	t.Helper()
	b := startBackend(t, ns, name, name+"-a", nodeA)
	probe := fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))
	probe.FailureThreshold = ft
	swh := resource(ns, name, webAndSMTP[:1], probe)
	swh.Spec.Healthcheck.PeriodSeconds = period
	swh.Spec.Healthcheck.FastPeriodSeconds = fast
	swh.Spec.Healthcheck.DownPeriodSeconds = down
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, name, map[string]string{name + "-web-node-a": name + "-a:TTF"})
	return b
}

// TestAdaptiveTiming measures, side by side in one run, a resource
// without adaptive timing and one with it: the fast period shortens a
// failure's withdrawal from about failureThreshold periods to one period
// and two fast ones; the down period probes a dead pod less often, and
// sees it recover within the down period.
func TestAdaptiveTiming(t *testing.T) {
	startAgent(t, nodeA)

	t.Run("fast period", func(t *testing.T) {
		ns := namespace(t)
		const period, ft = 4, 3
		plain := pacedResource(t, ns, "plain", period, ft, nil, nil)
		fast := pacedResource(t, ns, "fast", period, ft, ptr.To[int32](1), nil)
		failed := time.Now()
		plain.http.SetStatus(http.StatusServiceUnavailable)
		fast.http.SetStatus(http.StatusServiceUnavailable)
		withdrawn := map[string]time.Duration{}
		for _, name := range []string{"fast", "plain"} {
			waitPublished(t, ns, name, map[string]string{name + "-web-node-a": name + "-a:FFF"})
			withdrawn[name] = time.Since(failed)
		}
		// At most a period to the first failure, two fast periods to the
		// third, and 1.5 s for the write; without: two more periods.
		if bound := period*time.Second + 2*time.Second + 1500*time.Millisecond; withdrawn["fast"] > bound {
			t.Errorf("with fastPeriodSeconds 1, withdrawn %s after the failure, over %s", withdrawn["fast"], bound)
		}
		if withdrawn["plain"] < (ft-1)*period*time.Second {
			t.Errorf("without it, withdrawn %s after the failure, under %d periods", withdrawn["plain"], ft-1)
		}
		t.Logf("failure to withdrawal (period %d s, failureThreshold %d): fast period 1 s %s, none %s",
			period, ft, withdrawn["fast"].Round(time.Millisecond), withdrawn["plain"].Round(time.Millisecond))
	})

	t.Run("down period", func(t *testing.T) {
		ns := namespace(t)
		const period, down = 1, 3
		plain := pacedResource(t, ns, "plain", period, 1, nil, nil)
		slow := pacedResource(t, ns, "slow", period, 1, nil, ptr.To[int32](down))
		plain.http.SetStatus(http.StatusServiceUnavailable)
		slow.http.SetStatus(http.StatusServiceUnavailable)
		for _, name := range []string{"plain", "slow"} {
			waitPublished(t, ns, name, map[string]string{name + "-web-node-a": name + "-a:FFF"})
		}
		plainHits, slowHits := plain.http.Hits(), slow.http.Hits()
		const watch = 4 * down * time.Second
		time.Sleep(watch)
		plainHits, slowHits = plain.http.Hits()-plainHits, slow.http.Hits()-slowHits
		if slowHits*2 > plainHits || slowHits > int64(watch/(down*time.Second))+1 {
			t.Errorf("over %s down: %d probes with downPeriodSeconds %d, %d without", watch, slowHits, down, plainHits)
		}
		recovered := time.Now()
		slow.http.SetStatus(http.StatusOK)
		waitPublished(t, ns, "slow", map[string]string{"slow-web-node-a": "slow-a:TTF"})
		back := time.Since(recovered)
		if bound := down*time.Second + time.Second; back > bound {
			t.Errorf("the down pod passed again %s after it recovered, over the down period and a second (%s)", back, bound)
		}
		t.Logf("probes of a down pod over %s: down period %d s %d, none %d (%.1fx fewer); recovery seen after %s",
			watch, down, slowHits, plainHits, float64(plainHits)/float64(max(slowHits, 1)), back.Round(time.Millisecond))
	})
}
