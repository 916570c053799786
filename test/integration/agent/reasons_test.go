package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// sliceReasons merges the reasons annotations of a resource's slices, and
// returns the slices' resourceVersions.
func sliceReasons(ctx context.Context, ns, name string) (swhv1alpha1.EndpointReasons, map[string]string, error) {
	_, list, err := published(ctx, ns, name)
	if err != nil {
		return nil, nil, err
	}
	out := swhv1alpha1.EndpointReasons{}
	versions := map[string]string{}
	for i := range list {
		reasons, err := swhv1alpha1.EndpointReasonsOf(list[i].Annotations)
		if err != nil {
			return nil, nil, fmt.Errorf("slice %s: %w", list[i].Name, err)
		}
		for pod, r := range reasons {
			out[pod] = r
		}
		versions[list[i].Name] = list[i].ResourceVersion
	}
	return out, versions, nil
}

// probeResults sums the agent's probe results.
func (a *agent) probeResults(t testing.TB) float64 {
	families, err := a.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == "swh_agent_probe_results_total" {
			for _, m := range f.GetMetric() {
				total += counterValue(m)
			}
		}
	}
	return total
}

// waitReason waits until pod's reason is want (no entry when want is ""),
// and returns it.
func waitReason(t *testing.T, ns, name, pod, want string) swhv1alpha1.EndpointReason {
	t.Helper()
	var got swhv1alpha1.EndpointReason
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("reason of %s is %q", pod, want), func() error {
		reasons, _, err := sliceReasons(context.Background(), ns, name)
		if err != nil {
			return err
		}
		r, ok := reasons[pod]
		switch {
		case want == "" && ok:
			return fmt.Errorf("still %+v", r)
		case want != "" && (!ok || r.Reason != want):
			return fmt.Errorf("reasons %+v", reasons)
		}
		got = r
		return nil
	})
	return got
}

// TestSlicesSayWhy: a pod not passing is listed in its slice's reasons
// annotation with the probe, the reason and when it began; a new reason
// replaces it, a repeated probe result writes nothing, and the entry goes
// when the pod passes again.
func TestSlicesSayWhy(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	ctx := context.Background()
	b := startBackend(t, ns, "say", "say-a", nodeA)
	startBackend(t, ns, "say", "say-b", nodeA)
	b.http.SetStatus(http.StatusServiceUnavailable)
	swh := resource(ns, "say", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}

	first := waitReason(t, ns, "say", "say-a", "http-status")
	if first.Probe == nil || *first.Probe != 0 || first.Since.IsZero() ||
		!strings.HasPrefix(first.Message, "HTTP probe on 8080: http-status: ") {
		t.Errorf("reason %+v, want probe 0, a time, and the probe's message", first)
	}
	if reasons, _, _ := sliceReasons(ctx, ns, "say"); len(reasons) != 1 {
		t.Errorf("reasons %+v: want only say-a's (say-b passes)", reasons)
	}

	// Steady failure: the probe runs every second, the slice stays put.
	_, versions, err := sliceReasons(ctx, ns, "say")
	if err != nil {
		t.Fatal(err)
	}
	writes := a.sliceWrites(t)
	time.Sleep(3500 * time.Millisecond)
	_, again, err := sliceReasons(ctx, ns, "say")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(again) != fmt.Sprint(versions) || a.sliceWrites(t) != writes {
		t.Errorf("a failure that goes on rewrote its slice: versions %v then %v, %v writes then %v", versions, again, writes, a.sliceWrites(t))
	}

	// An agent restart: the new agent has no result at first, which is no
	// news; the reason, its time and the slice stay.
	a.Stop()
	a = startAgent(t, nodeA)
	// Two results of the new agent's probe, then a period more.
	harness.Eventually(t, 20*time.Second, "the restarted agent's first results", func() error {
		if n := a.probeResults(t); n < 2 {
			return fmt.Errorf("%v results", n)
		}
		return nil
	})
	time.Sleep(time.Second)
	reasons, after, err := sliceReasons(ctx, ns, "say")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(versions) || !reasons["say-a"].Since.Time.Equal(first.Since.Time) || reasons["say-a"].Reason != "http-status" {
		t.Errorf("an agent restart rewrote the slice: versions %v then %v; reason %+v, before %+v", versions, after, reasons["say-a"], first)
	}

	// A new reason, with no change of the endpoint's conditions.
	if err := b.http.Stop(); err != nil {
		t.Fatal(err)
	}
	refused := waitReason(t, ns, "say", "say-a", "refused")
	if refused.Since.Before(&first.Since) || refused.Message == first.Message {
		t.Errorf("after the reason changed: %+v, before %+v", refused, first)
	}

	if err := b.http.Start(); err != nil {
		t.Fatal(err)
	}
	b.http.SetStatus(http.StatusOK)
	waitReason(t, ns, "say", "say-a", "")
	waitPublished(t, ns, "say", map[string]string{"say-web-node-a": "say-a:TTF,say-b:TTF"})
}

// TestSlicesSayWhyMassFailure: 200 pods failing at once cost the writes
// their verdicts cost (one slice), reasons included, and their recovery
// clears every reason.
func TestSlicesSayWhyMassFailure(t *testing.T) {
	const pods = 200
	a := startAgent(t, nodeA)
	ns := namespace(t)
	ctx := context.Background()
	backends := make([]*backend, pods)
	for i := range pods {
		backends[i] = startBackend(t, ns, "mass", fmt.Sprintf("mass-%03d", i), nodeA)
	}
	swh := resource(ns, "mass", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	ready := func(n int) func() error {
		return func() error {
			got := readyPods(ctx, t, ns, "mass")
			reasons, _, err := sliceReasons(ctx, ns, "mass")
			if err != nil {
				return err
			}
			if len(got) != n || len(reasons) != pods-n {
				return fmt.Errorf("%d ready, %d reasons", len(got), len(reasons))
			}
			return nil
		}
	}
	harness.Eventually(t, 60*time.Second, "every pod ready", ready(pods))
	time.Sleep(2 * time.Second)

	before := a.sliceWrites(t)
	for _, b := range backends {
		b.http.SetStatus(http.StatusServiceUnavailable)
	}
	harness.Eventually(t, 30*time.Second, "no pod ready, each with its reason", ready(0))
	time.Sleep(2 * time.Second) // trailing writes land
	failWrites := a.sliceWrites(t) - before

	_, list, err := published(ctx, ns, "mass")
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for i := range list {
		size = max(size, len(list[i].Annotations[swhv1alpha1.AnnotationEndpointReasons]))
	}

	before = a.sliceWrites(t)
	for _, b := range backends {
		b.http.SetStatus(http.StatusOK)
	}
	harness.Eventually(t, 30*time.Second, "every pod ready again, no reason left", ready(pods))
	time.Sleep(2 * time.Second)
	recoverWrites := a.sliceWrites(t) - before
	t.Logf("%d pods in %d slices: %v slice writes when all failed at once, %v when all recovered; largest reasons annotation %d bytes",
		pods, len(list), failWrites, recoverWrites, size)
	// The probes of 200 pods run spread over a period: the agent coalesces
	// their verdicts into few writes per slice, never one per pod.
	if limit := float64(4 * len(list)); failWrites > limit || recoverWrites > limit {
		t.Errorf("%v writes on failure, %v on recovery, for %d slices: want at most %v", failWrites, recoverWrites, len(list), limit)
	}
	if len(list) != 1 {
		t.Errorf("%d slices, want 1 of %d endpoints", len(list), pods)
	}
	if size > swhv1alpha1.MaxEndpointReasonsBytes {
		t.Errorf("reasons annotation of %d bytes, over %d", size, swhv1alpha1.MaxEndpointReasonsBytes)
	}
}
