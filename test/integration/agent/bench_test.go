package agent_test

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/endpoints"
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
	return readyOn(list.Items, "")
}

// readyOn returns the pods the agents' slices publish ready on port (any
// port when ""), as endpoints.Read reads them.
func readyOn(list []discoveryv1.EndpointSlice, port string) map[string]bool {
	out := map[string]bool{}
	published, _ := endpoints.Read(list, endpoints.Options{}) // valid options: no error
	for _, p := range published {
		if p.Ready && p.Pod != nil && (port == "" || p.Port == port) {
			out[p.Pod.Name] = true
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
