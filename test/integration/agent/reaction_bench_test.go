package agent_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentapp "github.com/swh-dev/swh/agent/app"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// BenchmarkAgentReaction measures, with real HTTP backends and the real API
// server, how long a backend failure takes to reach a watch of the slices,
// two ways: from the failure itself (which includes waiting for the probe's
// next turn, 0 to 1 period) and from the probe result that flips the verdict
// (the backend's first failing response: failureThreshold is 1), which is
// the agent's own cost. The node's agent carries SWH_BENCH_LOAD_RESOURCES
// other resources (1,000 by default), each probing a pod of its own every
// second. It also counts the slice writes a single failure and a failure of
// every pod cost. Run it with `make bench-agent`.
func BenchmarkAgentReaction(b *testing.B) {
	const pods, trials = 20, 20
	const period = time.Second
	load := 1000
	if v := os.Getenv("SWH_BENCH_LOAD_RESOURCES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("SWH_BENCH_LOAD_RESOURCES=%q: %v", v, err)
		}
		load = n
	}
	ctx := context.Background()
	for range b.N {
		ns := controlPlane.TestNamespace(b)
		// The load is published by the first agent: it starts first.
		a := startAgentWith(b, nodeA, func(o *agentapp.Options) { o.Publisher.CoalesceWholeWindow = true })
		loadStart := time.Now()
		startLoad(ctx, b, ns, load)
		loadTook := time.Since(loadStart)
		backends := make([]*backend, pods)
		for i := range pods {
			backends[i] = startBackend(b, ns, "react", fmt.Sprintf("react-%02d", i), nodeA)
		}
		swh := resource(ns, "react", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
		if err := controlPlane.Client.Create(ctx, swh); err != nil {
			b.Fatal(err)
		}
		// Side by side in one run: the whole window, as before rounds
		// ended it, then the default.
		var p99 time.Duration
		for _, whole := range []bool{true, false} {
			mode := "the write waits out the window (--coalesce-whole-window)"
			if !whole {
				mode = "the write follows the round's last result (the default)"
				a = startAgentWith(b, nodeA, nil)
			}
			fromVerdict, massWrites := reactionTrials(ctx, b, a, ns, backends, trials, period, mode, load, loadTook)
			a.Stop()
			if !whole {
				slices.Sort(fromVerdict)
				p99 = fromVerdict[len(fromVerdict)*99/100]
				b.ReportMetric(massWrites, "writes-per-slice-mass-failure")
			}
			for _, be := range backends {
				be.http.SetStatus(http.StatusOK)
			}
		}
		b.ReportMetric(float64(p99.Microseconds())/1000, "ms-p99-verdict-to-watch")
	}
}

// reactionTrials fails each backend in turn with agent a running and
// prints, for mode, the delays from the failing answer and from the
// failure to the watch, and the writes per change and per mass failure;
// it returns the first delays and the mass failure's writes.
func reactionTrials(ctx context.Context, b *testing.B, a *agent, ns string, backends []*backend, trials int, period time.Duration, mode string, load int, loadTook time.Duration) ([]time.Duration, float64) {
	pods := len(backends)
	all := func(m map[string]bool) bool { return len(m) == pods }
	waitReady(ctx, b, ns, "react", all)
	time.Sleep(2 * period)

	var fromFailure, fromVerdict []time.Duration
	var writesPerChange []float64
	for i := range trials {
		be := backends[i%pods]
		victim := be.pod.Name
		w := watchReady(ctx, b, ns, "react")
		before := a.sliceWrites(b)
		t0 := time.Now()
		be.http.SetStatus(http.StatusServiceUnavailable)
		t1 := w.until(b, func(m map[string]bool) bool { return !m[victim] && len(m) == pods-1 })
		w.stop()
		tv := be.http.FirstServed()
		if tv.IsZero() || tv.After(t1) {
			b.Fatalf("trial %d: the backend's first failing answer (%v) is not before the slice change (%v)", i, tv, t1)
		}
		fromFailure = append(fromFailure, t1.Sub(t0))
		fromVerdict = append(fromVerdict, t1.Sub(tv))
		time.Sleep(300 * time.Millisecond) // let any trailing write land before counting
		writesPerChange = append(writesPerChange, a.sliceWrites(b)-before)
		be.http.SetStatus(http.StatusOK)
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

	fmt.Printf("agent reaction over %d failures (period %v, failureThreshold 1, coalescing window %s; %s), with %d other resources on the node's agent (%d probes/s; set up in %v); load average %s:\n",
		trials, period, cmp.Or(os.Getenv("SWH_AGENT_COALESCE"), "30ms, the default"), mode, load, load+pods, loadTook.Round(time.Second), harness.LoadAverage())
	fmt.Printf("  probe result flipping the verdict -> slice change seen by a watch: %s  (goal: p99 under 50ms)\n", durationQuantiles(fromVerdict))
	fmt.Printf("  backend failure -> slice change seen by a watch: %s  (includes the wait for the probe's turn, 0..%v)\n", durationQuantiles(fromFailure), period)
	fmt.Printf("  slice writes per single endpoint change: %v (goal: 1)\n", writesPerChange)
	fmt.Printf("  slice writes when all %d pods of the slice fail at once: %v (goal: 1)\n", pods, massWrites)
	return fromVerdict, massWrites
}

// startLoad creates n resources, each selecting one pod of its own on
// nodeA with an HTTP backend, and waits until the agent publishes them all.
func startLoad(ctx context.Context, b *testing.B, ns string, n int) {
	if n == 0 {
		return
	}
	ips := harness.PodIPs(b, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, ip := range ips {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("load-%04d", i)
			srv, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: ip + ":8080"})
			if err != nil {
				errs <- err
				return
			}
			b.Cleanup(func() { _ = srv.Stop() })
			if _, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{
				Namespace: ns, Name: name, Node: nodeA, Labels: map[string]string{"app": name}, IPs: []string{ip},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}); err != nil {
				errs <- err
				return
			}
			if err := controlPlane.Client.Create(ctx, resource(ns, name, webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	harness.Eventually(b, 5*time.Minute, fmt.Sprintf("%d load resources published ready", n), func() error {
		list := &discoveryv1.EndpointSliceList{}
		if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		var load []discoveryv1.EndpointSlice
		for _, s := range list.Items {
			if strings.HasPrefix(s.Labels[discoveryv1.LabelServiceName], "load-") {
				load = append(load, s)
			}
		}
		ready, example := 0, ""
		published, _ := endpoints.Read(load, endpoints.Options{}) // valid options: no error
		for _, p := range published {
			if p.Ready {
				ready++
			} else if example == "" {
				example = fmt.Sprintf("%s on port %q of node %s (serving %t, terminating %t)", p.Key, p.Port, p.Node, p.Serving, p.Terminating)
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d ready; published, not ready: %s", ready, n, example)
		}
		return nil
	})
}

// readyWatch follows a resource's slices on a watch, so that a change is
// timed when the watch delivers it, as kube-proxy would see it.
type readyWatch struct {
	w      watch.Interface
	slices map[string]*discoveryv1.EndpointSlice
}

func watchReady(ctx context.Context, b *testing.B, ns, name string) *readyWatch {
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})
	if err != nil {
		b.Fatal(err)
	}
	return &readyWatch{w: w, slices: map[string]*discoveryv1.EndpointSlice{}}
}

// until returns when the watch delivered the event after which want holds
// of the ready endpoints (by pod name).
func (r *readyWatch) until(b *testing.B, want func(map[string]bool) bool) time.Time {
	return r.untilPort(b, "", want)
}

// untilPort is until for the endpoints of the slices of one port; "" is
// every port.
func (r *readyWatch) untilPort(b *testing.B, port string, want func(map[string]bool) bool) time.Time {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-r.w.ResultChan():
			if !ok {
				b.Fatal("the slice watch ended")
			}
			at := time.Now()
			s, isSlice := ev.Object.(*discoveryv1.EndpointSlice)
			if !isSlice {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(r.slices, s.Name)
			} else {
				r.slices[s.Name] = s
			}
			list := make([]discoveryv1.EndpointSlice, 0, len(r.slices))
			for _, sl := range r.slices {
				list = append(list, *sl)
			}
			if want(readyOn(list, port)) {
				return at
			}
		case <-timeout:
			b.Fatalf("the slice change (port %q) did not come within 30 s", port)
		}
	}
}

func (r *readyWatch) stop() { r.w.Stop() }

func durationQuantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration {
		return s[min(len(s)-1, int(p*float64(len(s))))].Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("p50 %v  p99 %v  max %v", q(0.5), q(0.99), s[len(s)-1].Round(100*time.Microsecond))
}
