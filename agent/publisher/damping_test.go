package publisher

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// flapWrites probes a backend that fails 30 s and passes 10 s, every
// 10 s (failureThreshold 3, successThreshold 1), for hours, and returns
// the published flips (each a slice write) in each hour.
func flapWrites(t *testing.T, d *damping, hours int) []int {
	t.Helper()
	key := targetKey{Resource: types.NamespacedName{Namespace: "ns", Name: "web"}, Pod: "a"}
	table := newTargetTable(false)
	tr, err := probes.NewTracker(probes.TrackerConfig{FailureThreshold: 3, SuccessThreshold: 1, InitialHealthy: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	table.put(key, &target{tracker: tr, damping: d, flaps: flapState{passingSince: t0}, passedOnce: true, window: 31 * time.Second, pod: "a"})
	addSteadyPod(t, table, key, d, t0)
	writes := make([]int, hours)
	published := true
	for at := time.Duration(0); at < time.Duration(hours)*time.Hour; at += 10 * time.Second {
		res := probes.Result{Status: probes.Failure, Reason: probes.ReasonHTTPStatus}
		if at%(40*time.Second) >= 30*time.Second {
			res = probes.Result{Status: probes.Success, Reason: probes.ReasonOK}
		}
		now := t0.Add(at)
		table.clock = func() time.Time { return now }
		table.observe(key, res, now, now, now)
		// What a reconcile then publishes (one at the end of an
		// ejection too, whose write lands in the same hour).
		if p := table.healthy(key); p != published {
			published = p
			writes[at/time.Hour]++
		}
	}
	return writes
}

// TestFlapDampingWrites: the flapping backend costs 180 writes an
// hour undamped; with the default damping (30 s, at most 10 min), at most
// 12 an hour once the run of flaps reaches the cap (20 withdrawals, in the
// third hour), and far fewer before.
func TestFlapDampingWrites(t *testing.T) {
	plain := flapWrites(t, nil, 4)
	damped := flapWrites(t, dampingOf(&swhv1alpha1.Healthcheck{FlapDamping: &swhv1alpha1.FlapDamping{BaseEjectionSeconds: 30, MaxEjectionSeconds: 600, StableSeconds: 600}}), 4)
	t.Logf("slice writes per hour of a backend failing 30 s and passing 10 s (period 10 s, failureThreshold 3): undamped %v, damped (30 s, at most 10 min) %v", plain, damped)
	if plain[1] < 170 {
		t.Errorf("undamped: %v writes an hour, want about 180", plain)
	}
	for h, n := range damped[2:] {
		if n > 12 {
			t.Errorf("damped: %d writes in hour %d, want at most 12", n, h+3)
		}
	}
	if damped[0] >= plain[0]/4 {
		t.Errorf("damped: %d writes in the first hour against %d undamped", damped[0], plain[0])
	}
}

// TestFlapDamping: the time out grows with each withdrawal of a run, is
// capped, and starts over after a stable period.
func TestFlapDamping(t *testing.T) {
	d := &damping{base: 10 * time.Second, max: 25 * time.Second, stable: time.Minute}
	key := targetKey{Resource: types.NamespacedName{Namespace: "ns", Name: "web"}, Pod: "a"}
	table := newTargetTable(false)
	tr, err := probes.NewTracker(probes.TrackerConfig{FailureThreshold: 1, SuccessThreshold: 1, InitialHealthy: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	table.put(key, &target{tracker: tr, damping: d, flaps: flapState{passingSince: t0}, pod: "a"})
	addSteadyPod(t, table, key, d, t0)
	fail := probes.Result{Status: probes.Failure, Reason: probes.ReasonRefused}
	ok := probes.Result{Status: probes.Success, Reason: probes.ReasonOK}
	at := t0
	table.clock = func() time.Time { return at }
	step := func(res probes.Result, after time.Duration) bool {
		at = at.Add(after)
		table.observe(key, res, at, at, at)
		return table.healthy(key)
	}
	// Each withdrawal, then a success every second until published: the
	// time out is 10, 20, 25 (capped) s.
	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second} {
		if step(fail, time.Second) {
			t.Fatalf("flap %d: a failure left it published", i+1)
		}
		out := time.Duration(0)
		for !step(ok, time.Second) {
			out += time.Second
		}
		if out+time.Second != want {
			t.Errorf("flap %d: out %s, want %s", i+1, out+time.Second, want)
		}
	}
	// A minute passing: the next withdrawal counts as the first.
	step(ok, time.Minute)
	step(fail, time.Second)
	out := time.Duration(0)
	for !step(ok, time.Second) {
		out += time.Second
	}
	if out+time.Second != 10*time.Second {
		t.Errorf("after a stable minute: out %s, want 10s", out+time.Second)
	}
	h := table.history(key.Resource)
	if len(h) != 2 || h[0].Pod != "a" || len(h[0].Transitions) != historyLen {
		t.Fatalf("history %+v, want the last %d transitions of pod a", h, historyLen)
	}
	last := h[0].Transitions[historyLen-1]
	if last.Event != swhv1alpha1.TransitionPublished || h[0].Transitions[historyLen-2].Event != swhv1alpha1.TransitionDamped ||
		h[0].Transitions[historyLen-3].Event != swhv1alpha1.TransitionWithdrawn || h[0].Transitions[historyLen-3].Reason != "refused" {
		t.Errorf("history ends %+v", h[0].Transitions[historyLen-3:])
	}
}

// addSteadyPod adds a pod b passing the same probe on the node: damping
// never keeps a port without a passing pod.
func addSteadyPod(t *testing.T, table *targetTable, of targetKey, d *damping, t0 time.Time) {
	t.Helper()
	tr, err := probes.NewTracker(probes.TrackerConfig{InitialHealthy: true})
	if err != nil {
		t.Fatal(err)
	}
	b := of
	b.Pod = "b"
	table.put(b, &target{tracker: tr, damping: d, flaps: flapState{passingSince: t0}, pod: "b"})
}

// TestFlapDampingKeepsAPodIn: the only pod of a probe on the node is
// published as soon as it passes again: damping keeps no port empty.
func TestFlapDampingKeepsAPodIn(t *testing.T) {
	key := targetKey{Resource: types.NamespacedName{Namespace: "ns", Name: "web"}, Pod: "a"}
	table := newTargetTable(false)
	tr, err := probes.NewTracker(probes.TrackerConfig{FailureThreshold: 1, InitialHealthy: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	table.put(key, &target{tracker: tr, damping: &damping{base: time.Minute, max: time.Hour, stable: time.Hour}, flaps: flapState{passingSince: t0}})
	at := t0
	table.clock = func() time.Time { return at }
	for _, r := range []probes.Result{{Status: probes.Failure, Reason: probes.ReasonRefused}, {Status: probes.Success, Reason: probes.ReasonOK}} {
		at = at.Add(time.Second)
		table.observe(key, r, at, at, at)
	}
	if !table.healthy(key) {
		t.Error("the only pod of the probe was kept out by damping")
	}
}
