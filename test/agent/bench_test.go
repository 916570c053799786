package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// sliceWrites sums the agent's slice writes.
func (a *agent) sliceWrites(b testing.TB) float64 {
	families, err := a.registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == "swh_agent_slice_writes_total" {
			for _, m := range f.GetMetric() {
				total += counterValue(m)
			}
		}
	}
	return total
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

// readyPods returns the pods ready in the resource's slices.
func readyPods(ctx context.Context, b testing.TB, ns, name string) map[string]bool {
	list := &discoveryv1.EndpointSliceList{}
	if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		b.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				out[ep.TargetRef.Name] = true
			}
		}
	}
	return out
}

// waitReady polls (every 2 ms) until exactly the pods in want are ready
// and returns when it saw it.
func waitReady(ctx context.Context, b testing.TB, ns, name string, want func(map[string]bool) bool) time.Time {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if want(readyPods(ctx, b, ns, name)) {
			return time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("%s: state not reached in 30 s", name)
	return time.Time{}
}

// BenchmarkAgentReaction measures, with real HTTP backends and the real API
// server, how long a backend failure takes to show in the slices (minus the
// failureThreshold x periodSeconds the probes need by design), and how many
// slice writes a single failure and a failure of every pod cost. Run it with
// `make bench-agent`.
func BenchmarkAgentReaction(b *testing.B) {
	const pods, trials = 20, 20
	const period = time.Second
	ctx := context.Background()
	for range b.N {
		a := startAgent(b, nodeA)
		ns := controlPlane.TestNamespace(b)
		backends := make([]*backend, pods)
		for i := range pods {
			backends[i] = startBackend(b, ns, "react", fmt.Sprintf("react-%02d", i), nodeA)
		}
		swh := resource(ns, "react", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
		if err := controlPlane.Client.Create(ctx, swh); err != nil {
			b.Fatal(err)
		}
		all := func(m map[string]bool) bool { return len(m) == pods }
		waitReady(ctx, b, ns, "react", all)
		time.Sleep(2 * period)

		var reactions []time.Duration
		var writesPerChange []float64
		for i := range trials {
			victim := backends[i%pods].pod.Name
			before := a.sliceWrites(b)
			t0 := time.Now()
			backends[i%pods].http.SetStatus(http.StatusServiceUnavailable)
			t1 := waitReady(ctx, b, ns, "react", func(m map[string]bool) bool { return !m[victim] && len(m) == pods-1 })
			reactions = append(reactions, t1.Sub(t0))
			time.Sleep(300 * time.Millisecond) // let any trailing write land before counting
			writesPerChange = append(writesPerChange, a.sliceWrites(b)-before)
			backends[i%pods].http.SetStatus(http.StatusOK)
			waitReady(ctx, b, ns, "react", all)
			time.Sleep(300 * time.Millisecond)
		}

		// Every pod fails at once: the writes of the one slice.
		before := a.sliceWrites(b)
		for _, be := range backends {
			be.http.SetStatus(http.StatusServiceUnavailable)
		}
		waitReady(ctx, b, ns, "react", func(m map[string]bool) bool { return len(m) == 0 })
		time.Sleep(2 * period)
		massWrites := a.sliceWrites(b) - before

		slices.Sort(reactions)
		pct := func(p float64) time.Duration { return reactions[int(p*float64(len(reactions)-1))] }
		budget := period // failureThreshold (1) x periodSeconds (1)
		fmt.Printf("agent reaction over %d failures (period %v, failureThreshold 1; probes are due 0..1 period after the failure):\n", trials, period)
		fmt.Printf("  failure -> slice visible: p50 %v  p99 %v  (max %v)\n", pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), reactions[len(reactions)-1].Round(time.Millisecond))
		fmt.Printf("  minus failureThreshold x period: p50 %v  p99 %v  (goal: p99 under 100ms)\n", (pct(0.5) - budget).Round(time.Millisecond), (pct(0.99) - budget).Round(time.Millisecond))
		fmt.Printf("  slice writes per single endpoint change: %v (goal: 1)\n", writesPerChange)
		fmt.Printf("  slice writes when all %d pods of the slice fail at once: %v (goal: 1)\n", pods, massWrites)
		b.ReportMetric(float64(pct(0.99).Milliseconds()), "ms-p99-failure-to-slice")
		b.ReportMetric(massWrites, "writes-per-slice-mass-failure")
		a.Stop()
	}
}
