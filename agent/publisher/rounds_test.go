package publisher

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestCountRound(t *testing.T) {
	r := types.NamespacedName{Namespace: "ns", Name: "web"}
	t0 := time.Unix(1000, 0)
	type result struct {
		due     time.Time
		changed bool
		// done is whether this result completes a round with a change.
		done bool
	}
	for _, tc := range []struct {
		name    string
		results []result
	}{
		{name: "a flip, then the rest of its round", results: []result{{t0, true, false}, {t0, false, false}, {t0, false, true}}},
		// Targets added one after the other are due microseconds apart.
		{name: "due times a little apart", results: []result{{t0.Add(40 * time.Microsecond), false, false}, {t0, true, false}, {t0.Add(3 * time.Millisecond), false, true}}},
		{name: "the last result flips", results: []result{{t0, false, false}, {t0, false, false}, {t0, true, true}}},
		{name: "no change: never done", results: []result{{t0, false, false}, {t0, false, false}, {t0, false, false}}},
		{
			name: "a round left incomplete, the next one done",
			results: []result{
				{t0, true, false}, {t0, false, false},
				{t0.Add(time.Second), false, false}, {t0.Add(time.Second), true, false},
				{t0, false, false}, // late: the window covers it
				{t0.Add(time.Second), false, true},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTargetTable(false)
			s.perResource[r] = 3
			for i, res := range tc.results {
				if got := s.countRound(r, res.due, res.changed); got != res.done {
					t.Errorf("result %d: done %v, want %v", i, got, res.done)
				}
			}
		})
	}
}
