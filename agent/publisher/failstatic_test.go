package publisher

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/probes"
)

// TestFailStatic feeds rounds of results to a table of targets, all
// passing at first (failureThreshold 2), and checks which are published
// passing (healthy or held) after each round.
func TestFailStatic(t *testing.T) {
	db := types.NamespacedName{Namespace: "ns", Name: "db"}
	web := types.NamespacedName{Namespace: "ns", Name: "web"}
	keys := map[string]targetKey{
		"db-a": {Resource: db, Pod: "a", Probe: 0}, "db-b": {Resource: db, Pod: "b", Probe: 0},
		"web-c": {Resource: web, Pod: "c", Probe: 0}, "web-d": {Resource: web, Pod: "d", Probe: 0},
	}
	ok := probes.Result{Status: probes.Success, Reason: probes.ReasonOK}
	fail := func(r probes.Reason) probes.Result { return probes.Result{Status: probes.Failure, Reason: r} }
	type round map[string]probes.Result
	for _, tc := range []struct {
		name   string
		only   []string // targets of the table; all when empty
		rounds []round
		// published lists, after the last round, the targets published
		// passing; held those of them kept by a hold.
		published, held []string
	}{
		{
			name:      "every probe of the node times out: all kept",
			rounds:    []round{{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonUnreachable)}, {"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonTimeout)}},
			published: []string{"db-a", "db-b", "web-c", "web-d"}, held: []string{"db-a", "db-b", "web-c", "web-d"},
		},
		{
			name:      "one pod times out among passing ones: withdrawn",
			rounds:    []round{{"db-a": fail(probes.ReasonTimeout), "db-b": ok, "web-c": ok, "web-d": ok}, {"db-a": fail(probes.ReasonTimeout), "db-b": ok, "web-c": ok, "web-d": ok}},
			published: []string{"db-b", "web-c", "web-d"},
		},
		{
			name: "a passing pod whose result comes later: the first one is withdrawn",
			rounds: []round{
				{"web-d": ok},
				{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout)},
				{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout)},
			},
			// web-d last passed: nothing says the checker fails it.
			published: []string{"web-d"},
		},
		{
			name:      "timeouts with one pod refusing: not the network",
			rounds:    []round{{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonRefused), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonTimeout)}, {"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonRefused), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonTimeout)}},
			published: nil,
		},
		{
			name:      "a single pod on the node times out: cannot tell, withdrawn",
			only:      []string{"db-a"},
			rounds:    []round{{"db-a": fail(probes.ReasonTimeout)}, {"db-a": fail(probes.ReasonTimeout)}},
			published: nil,
		},
		{
			name:      "every pod fails one probe with auth: kept, the other resource untouched",
			rounds:    []round{{"db-a": fail(probes.ReasonAuth), "db-b": fail(probes.ReasonAuth), "web-c": ok}, {"db-a": fail(probes.ReasonAuth), "db-b": fail(probes.ReasonAuth), "web-c": fail(probes.ReasonRefused)}, {"web-c": fail(probes.ReasonRefused)}},
			published: []string{"db-a", "db-b", "web-d"}, held: []string{"db-a", "db-b"},
		},
		{
			name:      "the only pod of a probe on the node fails auth: its own, withdrawn",
			only:      []string{"db-a", "web-c"},
			rounds:    []round{{"db-a": fail(probes.ReasonAuth), "web-c": ok}, {"db-a": fail(probes.ReasonAuth), "web-c": ok}},
			published: []string{"web-c"},
		},
		{
			name: "a held pod that fails otherwise is withdrawn at once; the others stay held",
			rounds: []round{
				{"db-a": fail(probes.ReasonAuth), "db-b": fail(probes.ReasonAuth)},
				{"db-a": fail(probes.ReasonAuth), "db-b": fail(probes.ReasonAuth)},
				{"db-a": fail(probes.ReasonRefused), "db-b": fail(probes.ReasonAuth)},
			},
			published: []string{"db-b", "web-c", "web-d"}, held: []string{"db-b"},
		},
		{
			name: "a pod answering ends the node's hold: the silent ones are decided by their next result",
			rounds: []round{
				{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonTimeout)},
				{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonTimeout)},
				{"web-c": fail(probes.ReasonRefused)},
				{"db-a": fail(probes.ReasonTimeout), "db-b": ok},
			},
			published: []string{"db-b", "web-d"}, held: []string{"web-d"},
		},
		{
			name:      "one pod fails auth, the other passes: withdrawn",
			rounds:    []round{{"db-a": fail(probes.ReasonAuth), "db-b": ok}, {"db-a": fail(probes.ReasonAuth), "db-b": ok}},
			published: []string{"db-b", "web-c", "web-d"},
		},
		{
			name:      "auth on one pod, tls on the other: not the same cause",
			rounds:    []round{{"db-a": fail(probes.ReasonAuth), "db-b": fail(probes.ReasonTLS)}, {"db-a": fail(probes.ReasonAuth), "db-b": fail(probes.ReasonTLS)}},
			published: []string{"web-c", "web-d"},
		},
		{
			name:      "a Secret that cannot be read: kept, even alone",
			only:      []string{"db-a"},
			rounds:    []round{{"db-a": fail(ReasonSecret)}, {"db-a": fail(ReasonSecret)}},
			published: []string{"db-a"}, held: []string{"db-a"},
		},
		{
			name: "the checker works again: a success keeps each held pod, a failure withdraws it",
			rounds: []round{
				{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonTimeout)},
				{"db-a": fail(probes.ReasonTimeout), "db-b": fail(probes.ReasonTimeout), "web-c": fail(probes.ReasonTimeout), "web-d": fail(probes.ReasonTimeout)},
				{"web-c": ok},
				{"db-a": ok, "db-b": fail(probes.ReasonRefused)},
			},
			// web-d has no result since: still kept until its next.
			published: []string{"db-a", "web-c", "web-d"}, held: []string{"web-d"},
		},
		{
			name: "a hold ends when its scope passes: the next failure starts over",
			rounds: []round{
				{"db-a": fail(ReasonSecret), "db-b": fail(ReasonSecret)},
				{"db-a": fail(ReasonSecret), "db-b": fail(ReasonSecret)},
				{"db-a": ok},
				{"db-b": fail(ReasonSecret)},
				{"db-a": fail(probes.ReasonAuth)},
				{"db-a": fail(probes.ReasonAuth)},
			},
			// db-a fails auth alone (db-b's last result is secret).
			published: []string{"db-b", "web-c", "web-d"}, held: []string{"db-b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := newTargetTable(false)
			names := tc.only
			if len(names) == 0 {
				names = []string{"db-a", "db-b", "web-c", "web-d"}
			}
			for _, n := range names {
				tr, err := probes.NewTracker(probes.TrackerConfig{FailureThreshold: 2, InitialHealthy: true})
				if err != nil {
					t.Fatal(err)
				}
				table.put(keys[n], &target{tracker: tr, passedOnce: true, window: 10 * time.Second})
			}
			now := time.Unix(1000, 0)
			for _, r := range tc.rounds {
				for _, n := range names {
					if res, ok := r[n]; ok {
						now = now.Add(time.Millisecond)
						table.observe(keys[n], res, now, now, now)
					}
				}
				now = now.Add(time.Second)
				// The verdicts: every pod Ready, no exclusive port.
				for _, t := range table.targets {
					t.kept = t.heldBy != nil
				}
			}
			var published, held []string
			for _, n := range names {
				if table.healthy(keys[n]) {
					published = append(published, n)
				}
				if table.targets[keys[n]].heldBy != nil {
					held = append(held, n)
				}
			}
			if fmt.Sprint(published) != fmt.Sprint(tc.published) || fmt.Sprint(held) != fmt.Sprint(tc.held) {
				t.Errorf("published %v, held %v; want %v, %v", published, held, tc.published, tc.held)
			}
		})
	}
}

// TestFailStaticEvidence: another pod's timeouts count for a node's hold
// only if it passed once and began failing with the target that turned
// unhealthy, within its window.
func TestFailStaticEvidence(t *testing.T) {
	res := types.NamespacedName{Namespace: "ns", Name: "web"}
	x, y := targetKey{Resource: res, Pod: "x"}, targetKey{Resource: res, Pod: "y"}
	timeout := probes.Result{Status: probes.Failure, Reason: probes.ReasonTimeout}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		// xPassed: x passed once; xSince: x's first timeout, after t0.
		xPassed bool
		xSince  time.Duration
		held    bool
	}{
		{name: "x began failing with y", xPassed: true, xSince: 19 * time.Second, held: true},
		{name: "x has failed since long before", xPassed: true, xSince: 0},
		{name: "x never passed", xPassed: false, xSince: 19 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := newTargetTable(false)
			for _, k := range []targetKey{x, y} {
				tr, err := probes.NewTracker(probes.TrackerConfig{FailureThreshold: 2, InitialHealthy: k == y || tc.xPassed})
				if err != nil {
					t.Fatal(err)
				}
				table.put(k, &target{tracker: tr, passedOnce: k == y || tc.xPassed, window: 5 * time.Second})
			}
			for at := tc.xSince; at < 22*time.Second; at += time.Second {
				now := t0.Add(at)
				table.observe(x, timeout, now, now, now)
			}
			for _, at := range []time.Duration{20 * time.Second, 21 * time.Second} {
				now := t0.Add(at + time.Millisecond)
				table.observe(y, timeout, now, now, now)
			}
			if held := table.targets[y].heldBy != nil; held != tc.held {
				t.Errorf("y held: %v, want %v", held, tc.held)
			}
		})
	}
}

// TestFailStaticInFlightAtRelease: a held target's probe that started
// before its hold ended (in flight as the checker came back) decides
// nothing; the next one does.
func TestFailStaticInFlightAtRelease(t *testing.T) {
	res := types.NamespacedName{Namespace: "ns", Name: "web"}
	a, b := targetKey{Resource: res, Pod: "a"}, targetKey{Resource: res, Pod: "b"}
	table := newTargetTable(false)
	for _, k := range []targetKey{a, b} {
		tr, err := probes.NewTracker(probes.TrackerConfig{FailureThreshold: 2, InitialHealthy: true})
		if err != nil {
			t.Fatal(err)
		}
		table.put(k, &target{tracker: tr, passedOnce: true, window: 5 * time.Second})
	}
	timeout := probes.Result{Status: probes.Failure, Reason: probes.ReasonTimeout}
	t0 := time.Unix(1000, 0)
	for _, at := range []time.Time{t0.Add(-time.Second), t0} {
		table.observe(a, timeout, at, at, at)
		table.observe(b, timeout, at, at, at.Add(time.Millisecond))
	}
	for _, k := range []targetKey{a, b} {
		table.targets[k].kept = table.targets[k].heldBy != nil
	}
	if table.targets[a].heldBy == nil || table.targets[b].heldBy == nil {
		t.Fatal("a node whose every probe times out: both targets should be held")
	}
	// a answers at t0+2s: the hold ends. b's probe started at t0+1.5s
	// (before) times out at t0+2.5s: b stays held.
	table.observe(a, probes.Result{Status: probes.Success, Reason: probes.ReasonOK}, t0, t0.Add(1900*time.Millisecond), t0.Add(2*time.Second))
	if o, _ := table.observe(b, timeout, t0, t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond)); o.flipped || !table.healthy(b) {
		t.Fatalf("a result in flight when the hold ended withdrew b (flipped %v)", o.flipped)
	}
	// The next one, started after the end, decides: withdrawn.
	if o, _ := table.observe(b, timeout, t0, t0.Add(3*time.Second), t0.Add(4*time.Second)); !o.flipped || table.healthy(b) {
		t.Fatalf("a failure after the hold ended kept b (flipped %v)", o.flipped)
	}
	if !table.healthy(a) || table.targets[a].heldBy != nil {
		t.Errorf("a answered: it should be published, and no longer held (held by %v)", table.targets[a].heldBy)
	}
}
