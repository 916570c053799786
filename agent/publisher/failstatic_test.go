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
			table := newTargetTable()
			names := tc.only
			if len(names) == 0 {
				names = []string{"db-a", "db-b", "web-c", "web-d"}
			}
			for _, n := range names {
				tr, err := probes.NewTracker(probes.TrackerConfig{FailureThreshold: 2, InitialHealthy: true})
				if err != nil {
					t.Fatal(err)
				}
				table.put(keys[n], &target{tracker: tr})
			}
			now := time.Unix(1000, 0)
			for _, r := range tc.rounds {
				for _, n := range names {
					if res, ok := r[n]; ok {
						now = now.Add(time.Millisecond)
						table.observe(keys[n], res, now)
					}
				}
				now = now.Add(time.Second)
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
