package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// TestEndpointsCarryNodeAndZone: Local traffic policies and the
// healthCheckNodePort count endpoints by nodeName; trafficDistribution
// works through the hints.
func TestEndpointsCarryNodeAndZone(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ns := namespace(t)
	startBackend(t, ns, "loc", "loc-a", nodeA)
	startBackend(t, ns, "loc", "loc-b", nodeB)
	swh := resource(ns, "loc", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(8080)))
	distribution := corev1.ServiceTrafficDistributionPreferSameNode
	swh.Spec.TrafficDistribution = &distribution
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "loc", map[string]string{"loc-web-node-a": "loc-a:TTF", "loc-web-node-b": "loc-b:TTF"})
	_, slices, err := published(context.Background(), ns, "loc")
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]string{nodeA: "zone-a", nodeB: "zone-b"}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			node := ep.TargetRef.Name[len("loc-"):]
			want := "node-" + node
			if ep.NodeName == nil || *ep.NodeName != want || ep.Zone == nil || *ep.Zone != zones[want] {
				t.Errorf("%s: endpoint %s has nodeName %v zone %v, want %s %s", s.Name, ep.TargetRef.Name, ep.NodeName, ep.Zone, want, zones[want])
			}
			if h := ep.Hints; h == nil || len(h.ForZones) != 1 || h.ForZones[0].Name != zones[want] ||
				len(h.ForNodes) != 1 || h.ForNodes[0].Name != want {
				t.Errorf("%s: endpoint %s has hints %+v, want zone %s and node %s (PreferSameNode)", s.Name, ep.TargetRef.Name, h, zones[want], want)
			}
		}
		if s.Labels[discoveryv1.LabelServiceName] != "loc" || s.Labels[discoveryv1.LabelManagedBy] != "agent.network.swh.dev" {
			t.Errorf("%s labels %v", s.Name, s.Labels)
		}
		if s.Annotations[corev1.EndpointsLastChangeTriggerTime] == "" {
			t.Errorf("%s has no last-change-trigger-time", s.Name)
		}
	}
}

// TestTerminatingPodIsMarkedAtOnce: the watch event, not the next probe,
// marks a deleted pod terminating: not ready, still serving.
func TestTerminatingPodIsMarkedAtOnce(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	startBackend(t, ns, "term", "term-a", nodeA)
	swh := resource(ns, "term", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(8080)))
	// The backend stays healthy: no probe result can explain the change.
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "term", map[string]string{"term-web-node-a": "term-a:TTF"})
	pod := &corev1.Pod{}
	if err := controlPlane.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "term-a"}, pod); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// Graceful: no kubelet confirms it, so the pod stays terminating.
	if err := controlPlane.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(300)); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "term", map[string]string{"term-web-node-a": "term-a:FTT"})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("terminating published after %v", d)
	}
	if err := harness.ForceDeletePod(context.Background(), controlPlane.Client, client.ObjectKeyFromObject(pod)); err != nil {
		t.Fatal(err)
	}
	// A node with no pod left publishes no slice for the port.
	waitPublished(t, ns, "term", map[string]string{})
}

// TestAgentRestartsDoNotFlap restarts the agent repeatedly under healthy
// backends while a watcher records every version of the slice: a ready
// endpoint must never be published not ready.
func TestAgentRestartsDoNotFlap(t *testing.T) {
	ns := namespace(t)
	startBackend(t, ns, "steady", "steady-a", nodeA)
	startBackend(t, ns, "steady", "steady-b", nodeA)
	swh := resource(ns, "steady", webAndSMTP,
		fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)),
		fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525)))
	// Thresholds above 1: a new tracker starting unhealthy would need
	// three successes to publish, which a watcher cannot miss.
	for i := range swh.Spec.Healthcheck.Probes {
		swh.Spec.Healthcheck.Probes[i].SuccessThreshold = 3
	}
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, nodeA)
	want := map[string]string{"steady-smtp-node-a": "steady-a:TTF,steady-b:TTF", "steady-web-node-a": "steady-a:TTF,steady-b:TTF"}
	waitPublished(t, ns, "steady", want)

	var flaps atomic.Int64
	var seen sync.Map
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, _, err := published(context.Background(), ns, "steady")
			if err == nil && fmt.Sprint(got) != fmt.Sprint(want) {
				flaps.Add(1)
				seen.Store(fmt.Sprint(got), true)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for range 5 {
		a.Stop()
		time.Sleep(200 * time.Millisecond)
		a = startAgent(t, nodeA)
		time.Sleep(2 * time.Second) // several probe periods
	}
	close(stop)
	<-watched
	if n := flaps.Load(); n > 0 {
		seen.Range(func(k, _ any) bool { t.Errorf("published during restarts: %v", k); return true })
		t.Fatalf("%d observations differed from the healthy state across 5 restarts", n)
	}
}

// TestConvergesAfterAPIServerOutage freezes the API server while a backend
// fails and recovers from its failure: once the server answers again, the
// slices converge to the backend's current state.
func TestConvergesAfterAPIServerOutage(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	b := startBackend(t, ns, "outage", "outage-a", nodeA)
	c := startBackend(t, ns, "outage", "outage-b", nodeA)
	swh := resource(ns, "outage", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "outage", map[string]string{"outage-web-node-a": "outage-a:TTF,outage-b:TTF"})
	resume, err := controlPlane.PauseAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = resume()
		}
	})
	b.http.SetStatus(http.StatusServiceUnavailable)
	c.http.SetStatus(http.StatusServiceUnavailable)
	time.Sleep(3 * time.Second) // probes fail; writes hang
	c.http.SetStatus(http.StatusOK)
	time.Sleep(2 * time.Second)
	resumed = true
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "outage", map[string]string{"outage-web-node-a": "outage-a:FFF,outage-b:TTF"})
}

// TestConvergesAfterAPIServerRestart stops kube-apiserver, fails a backend
// while it is down, starts it again: the agent's watches reconnect and the
// slices converge. Then the agent's next verdicts are written at once, as
// before the restart: a recovery, a failure and a recovery, each published
// within 2.5 s (a 1 s period, one result decides; about 1 s each). The
// soak found an agent whose writes conflicted for up to a minute after a
// restart, its cached slices older than its own writes while its watch
// reconnected (before the fix, 4.6 s here). One restart only: each one
// grows the reflectors' backoff for the tests that follow.
func TestConvergesAfterAPIServerRestart(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	b := startBackend(t, ns, "restart", "restart-a", nodeA)
	startBackend(t, ns, "restart", "restart-b", nodeA)
	swh := resource(ns, "restart", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "restart", map[string]string{"restart-web-node-a": "restart-a:TTF,restart-b:TTF"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- controlPlane.RestartAPIServer(ctx, 3*time.Second) }()
	time.Sleep(time.Second) // the server is going down
	b.http.SetStatus(http.StatusServiceUnavailable)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	down := map[string]string{"restart-web-node-a": "restart-a:FFF,restart-b:TTF"}
	up := map[string]string{"restart-web-node-a": "restart-a:TTF,restart-b:TTF"}
	waitPublished(t, ns, "restart", down)
	within := func(want map[string]string, what string) {
		t.Helper()
		start := time.Now()
		harness.Eventually(t, 2500*time.Millisecond, what, func() error {
			got, _, err := published(context.Background(), ns, "restart")
			if err != nil {
				return err
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("\n got %v\nwant %v", got, want)
			}
			return nil
		})
		t.Logf("%s: %s", what, time.Since(start).Round(10*time.Millisecond))
	}
	b.http.SetStatus(http.StatusOK)
	within(up, "restart-a back")
	b.http.SetStatus(http.StatusServiceUnavailable)
	within(down, "restart-a withdrawn again")
	b.http.SetStatus(http.StatusOK)
	within(up, "restart-a back again")
}
