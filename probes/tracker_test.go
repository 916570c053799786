package probes

import "testing"

func TestTracker(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     TrackerConfig
		results string // S success, F failure, U unknown
		healthy string // state after each result: H healthy, u unhealthy
		changes string // ^ when the result changed the state
	}{
		{"defaults start unhealthy, one success heals", TrackerConfig{}, "SFFFS", "HHHuH", "^  ^^"},
		{"failures must be consecutive", TrackerConfig{}, "SFFSFFSFFF", "HHHHHHHHHu", "^        ^"},
		{"success threshold", TrackerConfig{SuccessThreshold: 3}, "SSFSSS", "uuuuuH", "     ^"},
		{"failure threshold 1", TrackerConfig{FailureThreshold: 1}, "SFSF", "HuHu", "^^^^"},
		{"initially healthy", TrackerConfig{InitialHealthy: true}, "FFSFFF", "HHHHHu", "     ^"},
		{"initially healthy, successes change nothing", TrackerConfig{InitialHealthy: true}, "SSS", "HHH", "   "},
		{"unknown is ignored", TrackerConfig{SuccessThreshold: 2}, "SUS", "uuH", "  ^"},
		{"both thresholds", TrackerConfig{SuccessThreshold: 2, FailureThreshold: 2}, "SSFSFFSSS", "uHHHHuuHH", " ^   ^ ^ "},
	} {
		tr, err := NewTracker(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range tc.results {
			s := map[rune]Status{'S': Success, 'F': Failure, 'U': Unknown}[r]
			healthy, changed := tr.Observe(s)
			if healthy != (tc.healthy[i] == 'H') || changed != (tc.changes[i] == '^') || tr.Healthy() != healthy {
				t.Errorf("%s: after %s: healthy %v, changed %v", tc.name, tc.results[:i+1], healthy, changed)
			}
		}
	}
}

func TestTrackerCounters(t *testing.T) {
	tr, _ := NewTracker(TrackerConfig{SuccessThreshold: 2, FailureThreshold: 3})
	for range 10 {
		tr.Observe(Failure)
	}
	if tr.healthy || tr.failures != 3 || tr.successes != 0 {
		t.Errorf("%+v: counters must saturate at the threshold", *tr)
	}
	tr.Observe(Success)
	if tr.healthy || tr.failures != 0 || tr.successes != 1 {
		t.Errorf("%+v", *tr)
	}
	if _, err := NewTracker(TrackerConfig{FailureThreshold: -1}); err == nil {
		t.Error("a negative threshold was accepted")
	}
}
