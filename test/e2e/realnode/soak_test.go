package realnode_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// The soak's health check: GET /healthz on each port every second, two
// failures take a port of a pod out, one success brings it back.
const (
	soakPeriod   = time.Second
	soakFailures = 2
	soakTimeout  = time.Second
	// soakDetect bounds a failing target's withdrawal as a watch sees it:
	// failureThreshold periods, the last probe's timeout and 1 s for the
	// write. soakPropagate bounds what follows, until kube-proxy on every
	// node stopped sending to it (its sync is rate-limited to one per
	// 100 ms here, and the nodes share two cores with everything else).
	soakDetect    = soakFailures*soakPeriod + soakTimeout + time.Second
	soakPropagate = 2 * time.Second
)

// soakPorts are the workload's two ports, each gating only itself.
var soakPorts = []soakPort{{name: "http", port: 80, target: 8080}, {name: "alt", port: 81, target: 8081}}

type soakPort struct {
	name         string
	port, target int32
}

// TestSoak injects faults at random, one at a time, into the real-node
// cluster while clients on every node send requests to a resource with two
// probed ports, and checks the invariants all the time (soak_check.go
// says which): SOAK_DURATION (default 5m) of faults, SOAK_SEED to replay
// a run (the seed is printed first). make soak runs it for 30 minutes.
func TestSoak(t *testing.T) {
	if os.Getenv("SOAK_DURATION") == "" {
		t.Skip("the soak runs when asked: SOAK_DURATION (make soak)")
	}
	duration, seed := soakSettings(t)
	t.Logf("SOAK seed %d, %s of faults (the same draws: make soak SOAK_SEED=%d SOAK_DURATION=%s; inside the suite, as make test runs it: make realnode REALNODE_SOAK=%s SOAK_SEED=%d)", seed, duration, seed, duration, duration, seed)
	ctx, cancel := context.WithTimeout(context.Background(), duration+20*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))

	w := startSoakWorld(ctx, t)
	checker := startSoakChecker(ctx, t, w)
	resources := sampleResources(ctx)
	faults := soakFaults()
	var records []*faultRecord
	aborted := false
	deadline := time.Now().Add(duration)
	for i := 1; time.Now().Before(deadline); i++ {
		f := faults[rng.IntN(len(faults))]
		if f.possible != nil && !f.possible(ctx, w) {
			i--
			continue
		}
		rec := &faultRecord{kind: f.name, seq: i}
		checker.begin(rec)
		err := f.run(ctx, w, rng, rec)
		checker.healed(rec)
		if err == nil {
			err = w.converge(ctx, rec)
		}
		checker.judgePending(ctx)
		checker.end(rec)
		records = append(records, rec)
		t.Logf("fault %d %s [%s → healed %s → ended %s]: %s", i, rec.kind, rec.start.Format("15:04:05.000"), rec.healedAt.Format("15:04:05.000"), rec.endAt.Format("15:04:05.000"), rec.summary())
		if err != nil {
			t.Errorf("fault %d %s (%s): %v", i, rec.kind, rec.detail, err)
			aborted = true
			break
		}
		if violations := rec.violations(); len(violations) > 0 {
			t.Errorf("fault %d %s (%s) broke %d invariants:\n  %s", i, rec.kind, rec.detail, len(violations), strings.Join(violations, "\n  "))
		}
		// A quiet moment between faults: whatever still fails then is
		// charged to no fault, and is a violation.
		time.Sleep(time.Duration(1+rng.IntN(3)) * time.Second)
	}
	checker.judgePending(ctx)
	quiet, handovers := checker.stop()
	usage := resources.stop()
	t.Logf("SOAK report (seed %d, %s):\n%s", seed, duration, soakReport(records, quiet, handovers, usage))
	for _, v := range quiet {
		t.Errorf("outside every fault: %s", v)
	}
	for _, v := range usage.violations(duration >= 10*time.Minute) {
		if !aborted {
			t.Errorf("resource growth: %s", v)
		}
	}
	if err := w.cleanUp(ctx); err != nil {
		t.Errorf("after the soak: %v", err)
	}
	// The suite's tests that run after this one settle for 3 minutes; a
	// controller replica may be in crash-loop back-off for 5.
	if err := waitFor(ctx, 6*time.Minute, func() error { return chartReady(ctx, false) }); err != nil {
		t.Errorf("the chart not whole again after the soak: %v", err)
	}
}

// soakSettings reads SOAK_DURATION and SOAK_SEED.
func soakSettings(t *testing.T) (time.Duration, uint64) {
	duration := 5 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SOAK_DURATION=%q: want a duration such as 30m", v)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: want a number", v)
		}
		seed = s
	}
	return duration, seed
}

// soakDeployment is the soak's workload: six pods, two per node, each
// serving 8080 and 8081, which keep serving 3 s after SIGTERM (so a
// deleted pod's open requests end while kube-proxy stops sending to it).
func soakDeployment(ns string) *appsv1.Deployment {
	d := workload(ns, "soak", 6)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
	}}
	d.Spec.Template.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable = corev1.ScheduleAnyway
	c := &d.Spec.Template.Spec.Containers[0]
	c.Args = []string{"-http=:8080,:8081", "-shutdown-delay=3s"}
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "alt", ContainerPort: 8081})
	return d
}

// soakResource publishes both ports, each gated by its own probe.
func soakResource(r *swhv1alpha1.ServiceWithHealthchecks) {
	r.Spec.Ports = nil
	r.Spec.Healthcheck.Probes = nil
	for _, p := range soakPorts {
		r.Spec.Ports = append(r.Spec.Ports, swhv1alpha1.ServicePort{Name: p.name, Port: p.port, TargetPort: intstr.FromInt32(p.target)})
		r.Spec.Healthcheck.Probes = append(r.Spec.Healthcheck.Probes, swhv1alpha1.Probe{
			Mode: swhv1alpha1.ProbeModeHTTP, TimeoutSeconds: int32(soakTimeout / time.Second), SuccessThreshold: 1, FailureThreshold: soakFailures,
			HTTP: &swhv1alpha1.HTTPProbe{TargetPort: intstr.FromInt32(p.target), Path: "/healthz", Method: "GET", Scheme: swhv1alpha1.HTTPSchemeHTTP},
		})
	}
	r.Spec.Healthcheck.PeriodSeconds = int32(soakPeriod / time.Second)
}

// soakPrimary is the resource of the exclusive port: "write" (82 to
// 8080, gated by the same check as http) on the same six pods, all of
// which pass its probe: six candidate primaries all the time, of which at
// most one may ever be ready.
const (
	soakPrimary      = "soak-primary"
	soakPrimaryPort  = "write"
	soakPrimaryLease = 10 * time.Second
	// soakHandover bounds the move of the exclusive port once its holder
	// is withdrawn: the agent's write, the Lease freed, another agent
	// taking it, its uncached check of the other nodes' slices, its write.
	soakHandover = 3 * time.Second
)

func soakPrimaryResource(r *swhv1alpha1.ServiceWithHealthchecks) {
	r.Spec.Ports = []swhv1alpha1.ServicePort{{Name: soakPrimaryPort, Port: 82, TargetPort: intstr.FromInt32(8080)}}
	r.Spec.Selector = map[string]string{"app": "soak"}
	r.Spec.Exclusive = &swhv1alpha1.Exclusive{LeaseDurationSeconds: int32(soakPrimaryLease / time.Second)}
}

// soakReport is the table per fault type, then the quiet periods and the
// processes' figures.
func soakReport(records []*faultRecord, quiet []string, handovers int, usage resourceUsage) string {
	type row struct {
		n, sent, failed, allowed, withdrawals, falseW int
		worstConverge, worstDetect                    time.Duration
	}
	rows := map[string]*row{}
	for _, r := range records {
		x := rows[r.kind]
		if x == nil {
			x = &row{}
			rows[r.kind] = x
		}
		x.n++
		x.sent += r.sent
		x.failed += len(r.failures)
		x.allowed += r.allowedFailures
		x.withdrawals += len(r.withdrawals)
		x.falseW += len(r.falseWithdrawals)
		x.worstConverge = max(x.worstConverge, r.converged)
		x.worstDetect = max(x.worstDetect, r.detected)
	}
	kinds := make([]string, 0, len(rows))
	for k := range rows {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "| fault | injected | requests | failed (within its bound) | withdrawals (false) | worst detection | worst convergence |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, k := range kinds {
		x := rows[k]
		detect := "-"
		if x.worstDetect > 0 {
			detect = x.worstDetect.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d (%d) | %d (%d) | %s | %s |\n", k, x.n, x.sent, x.failed, x.allowed, x.withdrawals, x.falseW, detect, x.worstConverge.Round(100*time.Millisecond))
	}
	fmt.Fprintf(&b, "exclusive port %s: %d handovers, ready on two pods at once %d times (see the violations)\n", soakPrimaryPort, handovers, overlaps(records, quiet))
	fmt.Fprintf(&b, "outside faults: %d violations\n%s", len(quiet), usage)
	return b.String()
}

// overlaps counts the times the exclusive port was seen ready on two pods.
func overlaps(records []*faultRecord, quiet []string) int {
	n := 0
	count := func(lines []string) {
		for _, l := range lines {
			if strings.Contains(l, "exclusive port "+soakPrimaryPort+" ready on") {
				n++
			}
		}
	}
	for _, r := range records {
		r.mu.Lock()
		count(r.problems)
		r.mu.Unlock()
	}
	count(quiet)
	return n
}
