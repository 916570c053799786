package agent_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// The timing BenchmarkAgentAdaptiveTiming compares: the example.
const (
	paceBenchPeriod = 10 * time.Second
	paceBenchFast   = 1 * time.Second
	paceBenchDown   = 30 * time.Second
	paceBenchFT     = 3 // failureThreshold
)

// BenchmarkAgentAdaptiveTiming measures adaptive timing side by side with
// today's behaviour in one run: one agent, two resources in one namespace,
// "plain" (periodSeconds 10, failureThreshold 3) and "paced" (the same with
// fastPeriodSeconds 1 and downPeriodSeconds 30), each selecting
// SWH_BENCH_PACE_PODS pods of its own (50) with an HTTP backend. It counts
// the probes the backends answer while every pod passes (over 3 periods),
// fails every backend at a random point of one period and times each
// failure to the slice change seen by a watch, counts the probes of the
// dead pods (over 9 periods, 3 down periods), then recovers every backend
// at a random point of one down period and times each recovery the same
// way. The probe counts are read between the resources' probe bursts: each
// resource's probes run together at its phase, so a count over whole
// periods is exact. Run it with `make bench-agent`.
func BenchmarkAgentAdaptiveTiming(b *testing.B) {
	pods := max(1, envInt(b, "SWH_BENCH_PACE_PODS", 50))
	const steadyWindow, deadWindow = 3 * paceBenchPeriod, 3 * paceBenchDown
	ctx := context.Background()
	names := []string{"plain", "paced"}
	for range b.N {
		started := time.Now()
		a := startAgent(b, nodeA)
		ns := namespace(b)
		backends := map[string][]*backend{}
		for _, name := range names {
			for i := range pods {
				backends[name] = append(backends[name], startBackend(b, ns, name, fmt.Sprintf("%s-%02d", name, i), nodeA))
			}
		}
		for _, name := range names {
			probe := fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))
			probe.FailureThreshold = paceBenchFT
			swh := resource(ns, name, webAndSMTP[:1], probe)
			swh.Spec.Healthcheck.PeriodSeconds = int32(paceBenchPeriod / time.Second)
			if name == "paced" {
				swh.Spec.Healthcheck.FastPeriodSeconds = ptr.To(int32(paceBenchFast / time.Second))
				swh.Spec.Healthcheck.DownPeriodSeconds = ptr.To(int32(paceBenchDown / time.Second))
			}
			if err := controlPlane.Client.Create(ctx, swh); err != nil {
				b.Fatal(err)
			}
		}
		for _, name := range names {
			waitReady(ctx, b, ns, name, func(m map[string]bool) bool { return len(m) == pods })
		}
		fmt.Printf("agent adaptive timing: one agent, two resources of %d pods each with an HTTP backend, one HTTP probe (timeout 1 s, successThreshold 1, failureThreshold %d, period %v): plain, and paced with fastPeriodSeconds %d and downPeriodSeconds %d; all ready after %v; load average %s\n",
			pods, paceBenchFT, paceBenchPeriod, paceBenchFast/time.Second, paceBenchDown/time.Second, time.Since(started).Round(time.Second), harness.LoadAverage())

		// The resources' phases, from their backends' hits: the counts
		// start and end halfway between the bursts.
		bursts := probeBursts(b, paceBenchPeriod, backends["plain"], backends["paced"])
		quiet := func() time.Time { return quietInstant(paceBenchPeriod, bursts) }
		count := func(window time.Duration) map[string][]int64 {
			time.Sleep(time.Until(quiet()))
			before := hitsOf(backends)
			time.Sleep(window)
			after := hitsOf(backends)
			for _, name := range names {
				for i := range after[name] {
					after[name][i] -= before[name][i]
				}
			}
			return after
		}

		// Steady state: every pod passes.
		steady := count(steadyWindow)
		steadyRate := map[string]float64{}
		for _, name := range names {
			steadyRate[name] = float64(sum(steady[name])) / float64(pods) / steadyWindow.Seconds()
		}
		fmt.Printf("  steady, over %v: %s\n", steadyWindow, perPodCounts(steady, names))

		// Failure: every backend fails at a random point of one period.
		w := watchPods(ctx, b, ns)
		b.Cleanup(w.stop)
		runs := paceRuns(backends, names)
		failAt := spread(b, runs, paceBenchPeriod, http.StatusServiceUnavailable)
		withdrawn := w.waitChanges(b, runs, failAt, false, paceBenchPeriod*(paceBenchFT+1)+15*time.Second)
		toWithdrawal, toFirstFail, failToVerdict := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
		for i, r := range runs {
			first := r.be.http.FirstServed()
			if first.IsZero() || first.Before(failAt[i]) || first.After(withdrawn[i]) {
				b.Fatalf("%s: the first failing answer (%v) is not between the failure (%v) and the withdrawal (%v)", r.be.pod.Name, first, failAt[i], withdrawn[i])
			}
			toWithdrawal[r.name] = append(toWithdrawal[r.name], withdrawn[i].Sub(failAt[i]))
			toFirstFail[r.name] = append(toFirstFail[r.name], first.Sub(failAt[i]))
			failToVerdict[r.name] = append(failToVerdict[r.name], withdrawn[i].Sub(first))
		}
		for _, name := range names {
			fmt.Printf("  %s: failure -> withdrawal seen by a watch %s; failure -> first failing answer %s; first failing answer -> withdrawal %s\n",
				name, durationQuantiles(toWithdrawal[name]), durationQuantiles(toFirstFail[name]), durationQuantiles(failToVerdict[name]))
		}

		// Dead pods: every backend fails.
		dead := count(deadWindow)
		deadPerMin := map[string]float64{}
		for _, name := range names {
			deadPerMin[name] = float64(sum(dead[name])) / float64(pods) / deadWindow.Minutes()
		}
		fmt.Printf("  dead, over %v: %s\n", deadWindow, perPodCounts(dead, names))

		// Recovery: every backend passes again, at a random point of one
		// down period.
		recoverAt := spread(b, runs, paceBenchDown, http.StatusOK)
		recovered := w.waitChanges(b, runs, recoverAt, true, 2*paceBenchDown+15*time.Second)
		toRecovery, toFirstPass := map[string][]time.Duration{}, map[string][]time.Duration{}
		for i, r := range runs {
			toRecovery[r.name] = append(toRecovery[r.name], recovered[i].Sub(recoverAt[i]))
			if first := r.be.http.FirstServed(); !first.IsZero() {
				toFirstPass[r.name] = append(toFirstPass[r.name], first.Sub(recoverAt[i]))
			}
		}
		for _, name := range names {
			fmt.Printf("  %s: recovery -> ready seen by a watch %s; recovery -> first passing answer %s\n",
				name, durationQuantiles(toRecovery[name]), durationQuantiles(toFirstPass[name]))
		}
		w.stop()
		a.Stop()

		steadyRatio := steadyRate["paced"] / steadyRate["plain"]
		deadCut := deadPerMin["plain"] / deadPerMin["paced"]
		b.Logf("FIGURE steady-probe-rate (probes/s per pod over %v, every pod passing) plain %.4f paced %.4f; paced/plain %.3f",
			steadyWindow, steadyRate["plain"], steadyRate["paced"], steadyRatio)
		b.Logf("FIGURE failure->withdrawal (%d pods each, failed at random points of the %v period) plain %s | paced %s",
			pods, paceBenchPeriod, durationQuantiles(toWithdrawal["plain"]), durationQuantiles(toWithdrawal["paced"]))
		b.Logf("FIGURE first-failing-answer->withdrawal plain %s | paced %s",
			durationQuantiles(failToVerdict["plain"]), durationQuantiles(failToVerdict["paced"]))
		b.Logf("FIGURE dead-pod-probes (per dead pod per minute over %v) plain %.2f paced %.2f; plain/paced %.2fx",
			deadWindow, deadPerMin["plain"], deadPerMin["paced"], deadCut)
		b.Logf("FIGURE recovery->ready (recovered at random points of %v) plain %s | paced %s",
			paceBenchDown, durationQuantiles(toRecovery["plain"]), durationQuantiles(toRecovery["paced"]))
		b.Logf("FIGURE load average %s; the benchmark took %v", harness.LoadAverage(), time.Since(started).Round(time.Second))

		for _, name := range names {
			b.ReportMetric(quantile(toWithdrawal[name], 0.5).Seconds(), "s-p50-withdrawal-"+name)
			b.ReportMetric(quantile(toWithdrawal[name], 0.99).Seconds(), "s-p99-withdrawal-"+name)
			b.ReportMetric(quantile(toRecovery[name], 1).Seconds(), "s-max-recovery-"+name)
			b.ReportMetric(deadPerMin[name], "probes/min-dead-"+name)
			b.ReportMetric(steadyRate[name], "probes/s-steady-"+name)
		}
		b.ReportMetric(deadCut, "x-dead-probe-cut")
		b.ReportMetric(steadyRatio, "x-steady-rate")
	}
}

// paceRun is one pod of BenchmarkAgentAdaptiveTiming.
type paceRun struct {
	name string // its resource
	be   *backend
}

func paceRuns(backends map[string][]*backend, names []string) []paceRun {
	var out []paceRun
	for _, name := range names {
		for _, be := range backends[name] {
			out = append(out, paceRun{name: name, be: be})
		}
	}
	return out
}

// spread sets the status of every run's backend at a random point of the
// next span, in order of those points, and returns when each was set.
func spread(b *testing.B, runs []paceRun, span time.Duration, status int) []time.Time {
	start := time.Now()
	offsets := make([]time.Duration, len(runs))
	order := make([]int, len(runs))
	for i := range runs {
		offsets[i], order[i] = rand.N(span), i
	}
	slices.SortFunc(order, func(i, j int) int { return cmp.Compare(offsets[i], offsets[j]) })
	at := make([]time.Time, len(runs))
	for _, i := range order {
		time.Sleep(time.Until(start.Add(offsets[i])))
		at[i] = time.Now()
		runs[i].be.http.SetStatus(status)
	}
	if late := time.Since(start.Add(offsets[order[len(order)-1]])); late > 100*time.Millisecond {
		b.Logf("the last status change came %v late", late)
	}
	return at
}

// hitsOf returns the hits of every backend.
func hitsOf(backends map[string][]*backend) map[string][]int64 {
	out := map[string][]int64{}
	for name, bes := range backends {
		for _, be := range bes {
			out[name] = append(out[name], be.http.Hits())
		}
	}
	return out
}

func sum(ns []int64) int64 {
	var s int64
	for _, n := range ns {
		s += n
	}
	return s
}

// perPodCounts describes the probes each pod answered, per resource.
func perPodCounts(counts map[string][]int64, names []string) string {
	var out string
	for _, name := range names {
		c := counts[name]
		out += fmt.Sprintf("%s %d probes (per pod %d to %d)  ", name, sum(c), slices.Min(c), slices.Max(c))
	}
	return out
}

func quantile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// probeBursts returns, for each group of backends, when the probes of its
// resource last started hitting them: within a period (and 2 s), as each
// resource probes all its pods at once.
func probeBursts(b *testing.B, period time.Duration, groups ...[]*backend) []time.Time {
	total := func(g []*backend) int64 {
		var n int64
		for _, be := range g {
			n += be.http.Hits()
		}
		return n
	}
	base := make([]int64, len(groups))
	seen := make([]time.Time, len(groups))
	deadline := time.Now().Add(period + 2*time.Second)
	for i, g := range groups {
		base[i] = total(g)
	}
	for slices.ContainsFunc(seen, time.Time.IsZero) {
		if time.Now().After(deadline) {
			b.Fatalf("no probe burst within %v: %v", period+2*time.Second, seen)
		}
		time.Sleep(5 * time.Millisecond)
		now := time.Now()
		for i, g := range groups {
			if seen[i].IsZero() && total(g) != base[i] {
				seen[i] = now
			}
		}
	}
	return seen
}

// quietInstant returns the next instant (from a second on) whose offset in
// the period is the farthest from the offsets of every burst.
func quietInstant(period time.Duration, bursts []time.Time) time.Time {
	p := int64(period)
	mod := func(v int64) int64 { return ((v % p) + p) % p }
	offs := make([]int64, len(bursts))
	for i, t := range bursts {
		offs[i] = mod(t.UnixNano())
	}
	slices.Sort(offs)
	var best, gap int64
	for i, o := range offs {
		next := offs[(i+1)%len(offs)]
		g := mod(next - o)
		if g == 0 {
			g = p // one burst, or two together
		}
		if g > gap {
			best, gap = mod(o+g/2), g
		}
	}
	earliest := time.Now().Add(time.Second)
	return earliest.Add(time.Duration(mod(best - earliest.UnixNano())))
}

// podWatch follows the slices of a namespace on a watch and records, per
// pod, when each change of its readiness was delivered.
type podWatch struct {
	w       watch.Interface
	mu      sync.Mutex
	changes map[string][]readyChange
	err     error
	done    chan struct{}
}

type readyChange struct {
	at    time.Time
	ready bool
}

func watchPods(ctx context.Context, b *testing.B, ns string) *podWatch {
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(ns), client.HasLabels{discoveryv1.LabelServiceName})
	if err != nil {
		b.Fatal(err)
	}
	p := &podWatch{w: w, changes: map[string][]readyChange{}, done: make(chan struct{})}
	go p.run()
	return p
}

func (p *podWatch) run() {
	defer close(p.done)
	current := map[string]*discoveryv1.EndpointSlice{}
	ready := map[string]bool{}
	for ev := range p.w.ResultChan() {
		at := time.Now()
		if ev.Type == watch.Error {
			p.mu.Lock()
			p.err = fmt.Errorf("the slice watch failed: %v", ev.Object)
			p.mu.Unlock()
			return
		}
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		if ev.Type == watch.Deleted {
			delete(current, s.Name)
		} else {
			current[s.Name] = s
		}
		list := make([]discoveryv1.EndpointSlice, 0, len(current))
		for _, sl := range current {
			list = append(list, *sl)
		}
		now := readyOn(list, "")
		p.mu.Lock()
		for pod := range ready {
			if !now[pod] {
				p.changes[pod] = append(p.changes[pod], readyChange{at: at, ready: false})
			}
		}
		for pod := range now {
			if !ready[pod] {
				p.changes[pod] = append(p.changes[pod], readyChange{at: at, ready: true})
			}
		}
		p.mu.Unlock()
		ready = now
	}
	p.mu.Lock()
	if p.err == nil {
		p.err = fmt.Errorf("the slice watch ended")
	}
	p.mu.Unlock()
}

// waitChanges waits until each run's pod was published ready (or not)
// after since[i], and returns when the watch delivered each change.
func (p *podWatch) waitChanges(b *testing.B, runs []paceRun, since []time.Time, ready bool, timeout time.Duration) []time.Time {
	deadline := time.Now().Add(timeout)
	out := make([]time.Time, len(runs))
	for {
		p.mu.Lock()
		missing, err := "", p.err
		for i, r := range runs {
			if !out[i].IsZero() {
				continue
			}
			for _, c := range p.changes[r.be.pod.Name] {
				if c.ready == ready && c.at.After(since[i]) {
					out[i] = c.at
					break
				}
			}
			if out[i].IsZero() && missing == "" {
				missing = r.be.pod.Name
			}
		}
		p.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
		if missing == "" {
			return out
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s (and maybe others) not published with ready %t within %v", missing, ready, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *podWatch) stop() {
	p.w.Stop()
	<-p.done
}
