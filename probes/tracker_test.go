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

func TestTrackerPace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     TrackerConfig
		results string // S success, F failure, U unknown
		paces   string // pace after each result: s steady, c changing, d down
	}{
		{"a starting pod failing stays steady", TrackerConfig{}, "FFF", "sss"},
		{"healthy, then failures change, then down", TrackerConfig{}, "SFFF", "sccd"},
		{"a success ends the change", TrackerConfig{}, "SFSF", "scsc"},
		{"initially healthy counts as healthy before", TrackerConfig{InitialHealthy: true}, "FFFF", "ccdd"},
		{"recovery changes, then steady", TrackerConfig{InitialHealthy: true, FailureThreshold: 1, SuccessThreshold: 3}, "FSSS", "dccs"},
		{"a failure while recovering is down again", TrackerConfig{InitialHealthy: true, FailureThreshold: 1, SuccessThreshold: 2}, "FSFS", "dcdc"},
		{"a starting pod's first successes change", TrackerConfig{SuccessThreshold: 3}, "FSSSF", "sccsc"},
		{"failure threshold 1 goes down at once", TrackerConfig{FailureThreshold: 1}, "SFS", "sds"},
		{"unknown changes nothing", TrackerConfig{InitialHealthy: true}, "UFUFUF", "sccccd"},
	} {
		tr, err := NewTracker(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Pace() != PaceSteady {
			t.Errorf("%s: initial pace %v", tc.name, tr.Pace())
		}
		var got []byte
		for _, r := range tc.results {
			tr.Observe(map[rune]Status{'S': Success, 'F': Failure, 'U': Unknown}[r])
			got = append(got, tr.Pace().String()[0])
		}
		if string(got) != tc.paces {
			t.Errorf("%s: %s gives paces %s, want %s", tc.name, tc.results, got, tc.paces)
		}
	}
}

func TestPaceString(t *testing.T) {
	for p, want := range map[Pace]string{PaceSteady: "steady", PaceChanging: "changing", PaceDown: "down", 7: "Pace(7)"} {
		if p.String() != want {
			t.Errorf("%d: %q, want %q", uint8(p), p.String(), want)
		}
	}
}

func TestTrackerReset(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial bool
		results []Status
		reset   bool
		// afterFailure and afterSuccess are the states after one more
		// failure, then one success.
		afterFailure, afterSuccess bool
	}{
		// Reset to healthy forgets the failures counted: two more are
		// needed, not one.
		{name: "healthy after failures", initial: true, results: []Status{Failure, Failure, Failure}, reset: true, afterFailure: true, afterSuccess: true},
		// Reset to unhealthy forgets the success counted: two more are
		// needed.
		{name: "unhealthy after a success", results: []Status{Success}, afterFailure: false, afterSuccess: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTracker(TrackerConfig{SuccessThreshold: 2, FailureThreshold: 2, InitialHealthy: tc.initial})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tc.results {
				tr.Observe(r)
			}
			tr.Reset(tc.reset)
			if tr.Healthy() != tc.reset || tr.Pace() != PaceSteady {
				t.Fatalf("after Reset(%v): healthy %v, pace %v", tc.reset, tr.Healthy(), tr.Pace())
			}
			if got, _ := tr.Observe(Failure); got != tc.afterFailure {
				t.Errorf("after one failure: healthy %v, want %v", got, tc.afterFailure)
			}
			if got, _ := tr.Observe(Success); got != tc.afterSuccess {
				t.Errorf("then a success: healthy %v, want %v", got, tc.afterSuccess)
			}
		})
	}
}
