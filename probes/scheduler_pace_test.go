package probes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The pacing tests run in synctest bubbles too, so that the due times they
// check are exact.

func TestSchedulerPaceJobErrors(t *testing.T) {
	s := newScheduler(t, SchedulerOptions[string]{OnResult: func(Report[string]) {}})
	for _, tc := range []struct {
		name       string
		fast, down time.Duration
		want       string // in the error; "" for a valid job
	}{
		{"defaults", 0, 0, ""},
		{"fast equals period, down equals period", time.Second, time.Second, ""},
		{"fast below, down above", 100 * time.Millisecond, 10 * time.Second, ""},
		{"negative fast", -1, 0, "FastPeriod -1ns is negative"},
		{"fast above period", time.Second + 1, 0, "FastPeriod 1.000000001s exceeds Period 1s"},
		{"negative down", 0, -time.Second, "DownPeriod -1s is negative"},
		{"down below period", 0, time.Second - 1, "DownPeriod 999.999999ms is below Period 1s"},
	} {
		job := Job{Prober: instant(Success), Target: fakeTarget, Period: time.Second, FastPeriod: tc.fast, DownPeriod: tc.down}
		err := s.Add(tc.name, job)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Add: %v, want %q", tc.name, err, tc.want)
		}
		if tc.want != "" {
			_ = s.Add(tc.name, Job{Prober: job.Prober, Target: fakeTarget, Period: time.Second})
			if err := s.Update(tc.name, job); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: Update: %v, want %q", tc.name, err, tc.want)
			}
		}
	}
}

// TestSchedulerPace sets a key's pace from OnResult and checks when its
// probes were due: Period 1s, FastPeriod 100ms, DownPeriod 3s, the first
// probe due at 500ms, the grid's anchor.
func TestSchedulerPace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		paces    string        // the pace set after each result (c changing, d down, s steady), then steady
		probe    time.Duration // how long a probe takes
		fast     time.Duration // 0: 100ms
		down     time.Duration // 0: 3s
		run      time.Duration // 0: 6.8s
		want     string        // the due times
		started  string        // the start times, if checked
		noSetter bool          // OnResult does not call SetPace
	}{
		{name: "never set", noSetter: true, want: "[500ms 1.5s 2.5s 3.5s 4.5s 5.5s 6.5s]"},
		{name: "steady", paces: "sss", want: "[500ms 1.5s 2.5s 3.5s 4.5s 5.5s 6.5s]"},
		{name: "changing, then back to the grid", paces: "cc", want: "[500ms 600ms 700ms 1.5s 2.5s 3.5s 4.5s 5.5s 6.5s]"},
		{name: "down, on the anchor's grid", paces: "ddd", want: "[500ms 3.5s 6.5s]"},
		{name: "changing, down, changing, steady", paces: "ccdc", want: "[500ms 600ms 700ms 3.5s 3.6s 4.5s 5.5s 6.5s]"},
		{name: "no FastPeriod means Period", paces: "cccc", fast: -1, want: "[500ms 1.5s 2.5s 3.5s 4.5s 5.5s 6.5s]"},
		{name: "no DownPeriod means Period", paces: "dddd", down: -1, want: "[500ms 1.5s 2.5s 3.5s 4.5s 5.5s 6.5s]"},
		{
			// Each probe covers two or three fast ticks: the next is due
			// at once, as of the last one covered.
			name: "changing, probes slower than FastPeriod", paces: "cccc", probe: 250 * time.Millisecond,
			want:    "[500ms 700ms 1s 1.2s 1.5s 2.5s 3.5s 4.5s 5.5s 6.5s]",
			started: "[500ms 750ms 1s 1.25s 1.5s 2.5s 3.5s 4.5s 5.5s 6.5s]",
		},
		{
			// The first probe covers two down ticks.
			name: "down, probes slower than DownPeriod", paces: "ddd", probe: 6100 * time.Millisecond, run: 13 * time.Second,
			want:    "[500ms 6.5s]",
			started: "[500ms 6.6s]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					c collector[string]
					s *Scheduler[string]
				)
				s = newScheduler(t, SchedulerOptions[string]{NoJitter: true, OnResult: func(r Report[string]) {
					n := len(c.of(r.Key))
					c.add(r)
					if tc.noSetter {
						return
					}
					pace := PaceSteady
					if n < len(tc.paces) {
						pace = map[byte]Pace{'s': PaceSteady, 'c': PaceChanging, 'd': PaceDown}[tc.paces[n]]
					}
					if !s.SetPace(r.Key, pace) {
						t.Error("SetPace did not find the key")
					}
				}})
				job := Job{Prober: instant(Success), Target: fakeTarget, Period: time.Second, FastPeriod: 100 * time.Millisecond, DownPeriod: 3 * time.Second, Timeout: 10 * time.Second, InitialDelay: 500 * time.Millisecond}
				if tc.probe > 0 {
					job.Prober = sleeper(tc.probe)
				}
				if tc.fast < 0 {
					job.FastPeriod = 0
				}
				if tc.down < 0 {
					job.DownPeriod = 0
				}
				run := tc.run
				if run == 0 {
					run = 6800 * time.Millisecond
				}
				t0 := time.Now()
				if err := s.Add("a", job); err != nil {
					t.Fatal(err)
				}
				stop := start(t, s)
				time.Sleep(run)
				stop()
				got := c.of("a")
				if fmt.Sprint(offsets(got, t0)) != tc.want {
					t.Errorf("due at %v, want %s", offsets(got, t0), tc.want)
				}
				if tc.started != "" {
					var started []time.Duration
					for _, r := range got {
						started = append(started, r.Started.Sub(t0))
					}
					if fmt.Sprint(started) != tc.started {
						t.Errorf("started at %v, want %s", started, tc.started)
					}
				}
			})
		})
	}
}

// TestSchedulerPaceAligned fails the targets of five keys added together
// at once, each key paced by its own Tracker: their probes stay one batch
// through the fast pace, the down pace, the recovery and back to steady.
func TestSchedulerPaceAligned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		failing := ProberFunc(func(context.Context, Target) Result {
			if at := time.Since(t0); at > 1200*time.Millisecond && at < 4200*time.Millisecond {
				return Result{Status: Failure, Reason: ReasonRefused, Message: "refused"}
			}
			return Result{Status: Success, Reason: ReasonOK, Message: "ok"}
		})
		var (
			c        collector[int]
			s        *Scheduler[int]
			trackers = map[int]*Tracker{}
		)
		s = newScheduler(t, SchedulerOptions[int]{NoJitter: true, OnResult: func(r Report[int]) {
			c.add(r)
			tr := trackers[r.Key] // written before Run only
			tr.Observe(r.Result.Status)
			s.SetPace(r.Key, tr.Pace())
		}})
		const keys = 5
		for k := range keys {
			trackers[k], _ = NewTracker(TrackerConfig{FailureThreshold: 3, SuccessThreshold: 2})
			job := Job{Prober: failing, Target: fakeTarget, Period: time.Second, FastPeriod: 100 * time.Millisecond, DownPeriod: 3 * time.Second, InitialDelay: 500 * time.Millisecond}
			if err := s.Add(k, job); err != nil {
				t.Fatal(err)
			}
		}
		stop := start(t, s)
		time.Sleep(7800 * time.Millisecond)
		stop()

		// Passing at 500ms and, at the fast pace, healthy at 600ms;
		// failing at 1.5s, then every 100ms until unhealthy at 1.7s; down
		// until 6.5s on the 3s grid from 500ms; passing then, healthy
		// 100ms later, and steady on the 1s grid.
		const want = "[500ms 600ms 1.5s 1.6s 1.7s 3.5s 6.5s 6.6s 7.5s]"
		for k := range keys {
			got := c.of(k)
			if fmt.Sprint(offsets(got, t0)) != want {
				t.Errorf("key %d: due at %v, want %s", k, offsets(got, t0), want)
			}
			for _, r := range got {
				if !r.Started.Equal(r.Scheduled) {
					t.Errorf("key %d: due at %v, started at %v", k, r.Scheduled.Sub(t0), r.Started.Sub(t0))
				}
			}
		}
	})
}

// TestSchedulerNoPaceAsBefore checks that keys whose pace is never set, or
// set to PaceSteady at every result, are due when they were before pacing:
// one Period after the last probe was due, or, when that probe outlasted
// its period, at once as of the last tick it covered. The keys are
// jittered and their jobs have a FastPeriod and a DownPeriod.
func TestSchedulerNoPaceAsBefore(t *testing.T) {
	for _, setSteady := range []bool{false, true} {
		t.Run(fmt.Sprintf("SetPace(PaceSteady)=%v", setSteady), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					c collector[int]
					s *Scheduler[int]
				)
				s = newScheduler(t, SchedulerOptions[int]{OnResult: func(r Report[int]) {
					c.add(r)
					if setSteady {
						s.SetPace(r.Key, PaceSteady)
					}
				}})
				t0 := time.Now()
				const keys = 60
				periods := map[int]time.Duration{}
				for k := range keys {
					period := time.Duration(100+k%3*70) * time.Millisecond
					periods[k] = period
					job := Job{Prober: instant(Success), Target: fakeTarget, Period: period, FastPeriod: period / 10, DownPeriod: 3 * period, Timeout: time.Second}
					if k%4 > 0 {
						job.Prober = sleeper(time.Duration(k%4*90) * time.Millisecond)
					}
					if err := s.Add(k, job); err != nil {
						t.Fatal(err)
					}
				}
				stop := start(t, s)
				time.Sleep(3 * time.Second)
				stop()

				for k := range keys {
					got, p := c.of(k), periods[k]
					if len(got) < 5 {
						t.Fatalf("key %d: %d reports", k, len(got))
					}
					if first := got[0].Scheduled.Sub(t0); first < 0 || first >= p {
						t.Errorf("key %d: first due at %v, period %v", k, first, p)
					}
					for i, r := range got[1:] {
						prev := got[i]
						ended := prev.Started.Add(prev.Result.Latency)
						want := prev.Scheduled.Add(p)
						if want.Before(ended) {
							want = prev.Scheduled.Add(ended.Sub(prev.Scheduled) / p * p)
						}
						if !r.Scheduled.Equal(want) {
							t.Errorf("key %d (period %v): probe %d due at %v, want %v", k, p, i+1, r.Scheduled.Sub(t0), want.Sub(t0))
						}
					}
				}
			})
		})
	}
}

// TestSchedulerSetPaceIdle sets the pace of keys whose probe is not
// running: it moves their next probe at once, and Run wakes for it.
func TestSchedulerSetPaceIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[string]
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true})
		if s.SetPace("unknown", PaceChanging) {
			t.Error("SetPace found an unknown key")
		}
		t0 := time.Now()
		job := Job{Prober: instant(Success), Target: fakeTarget, Period: 10 * time.Second, FastPeriod: time.Second, DownPeriod: 20 * time.Second}
		_ = s.Add("a", job)
		job.InitialDelay = 1500 * time.Millisecond
		_ = s.Add("b", job)
		stop := start(t, s)
		at := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
		setPace := func(key string, p Pace) {
			t.Helper()
			if !s.SetPace(key, p) {
				t.Errorf("SetPace(%s, %v) did not find the key", key, p)
			}
		}
		nextOf := func(key string) time.Duration {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.time(s.entries[key].next).Sub(t0)
		}

		at(500 * time.Millisecond)
		setPace("b", PaceChanging) // before its first probe: due as planned, at 1.5s
		if next := nextOf("b"); next != 1500*time.Millisecond {
			t.Errorf("b: next due at %v, want 1.5s", next)
		}
		at(2700 * time.Millisecond)
		setPace("a", PaceChanging) // 2.7s after its last probe: due at once, as of 2s, not when Run wakes for b
		at(4500 * time.Millisecond)
		setPace("a", PaceChanging) // again: nothing changes
		if next := nextOf("a"); next != 5*time.Second {
			t.Errorf("a: next due at %v after setting its pace again, want 5s", next)
		}
		setPace("a", PaceDown) // next on the 20s grid
		if next := nextOf("a"); next != 20*time.Second {
			t.Errorf("a: next due at %v when down, want 20s", next)
		}
		at(6200 * time.Millisecond)
		setPace("b", PaceSteady) // next on the 10s grid from 1.5s
		at(6500 * time.Millisecond)
		setPace("a", PaceSteady) // back on the 10s grid, earlier than Run waits for
		at(21 * time.Second)
		if !s.Remove("a") || s.SetPace("a", PaceSteady) {
			t.Error("SetPace found a removed key")
		}
		stop()

		for key, want := range map[string][2]string{
			"a": {"[0s 2s 3s 4s 10s 20s]", "[0s 2.7s 3s 4s 10s 20s]"},
			"b": {"[1.5s 2.5s 3.5s 4.5s 5.5s 11.5s]", ""},
		} {
			got := c.of(key)
			if fmt.Sprint(offsets(got, t0)) != want[0] {
				t.Errorf("%s: due at %v, want %s", key, offsets(got, t0), want[0])
			}
			var started []time.Duration
			for _, r := range got {
				started = append(started, r.Started.Sub(t0))
			}
			if want[1] != "" && fmt.Sprint(started) != want[1] {
				t.Errorf("%s: started at %v, want %s", key, started, want[1])
			}
		}
	})
}

// TestSchedulerPaceWithTracker paces a key by its Tracker (failure
// threshold 3) and breaks its target between two probes: with pacing, the
// verdict flips two fast periods after the first failure, within Period +
// 2×FastPeriod of the break, instead of two periods after it.
func TestSchedulerPaceWithTracker(t *testing.T) {
	const (
		period = time.Second
		fast   = period / 10
		broken = 2300 * time.Millisecond
	)
	for _, tc := range []struct {
		pacing bool
		flip   time.Duration // after the first failure was due
	}{
		{pacing: true, flip: 2 * fast},
		{pacing: false, flip: 2 * period},
	} {
		t.Run(fmt.Sprintf("pacing=%v", tc.pacing), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				prober := ProberFunc(func(context.Context, Target) Result {
					if time.Since(t0) >= broken {
						return Result{Status: Failure, Reason: ReasonRefused, Message: "refused"}
					}
					return Result{Status: Success, Reason: ReasonOK, Message: "ok"}
				})
				var (
					mu                 sync.Mutex
					firstFailure, flip time.Time
					s                  *Scheduler[string]
				)
				tr, _ := NewTracker(TrackerConfig{FailureThreshold: 3})
				s = newScheduler(t, SchedulerOptions[string]{NoJitter: true, OnResult: func(r Report[string]) {
					mu.Lock()
					defer mu.Unlock()
					healthy, changed := tr.Observe(r.Result.Status)
					if r.Result.Status == Failure && firstFailure.IsZero() {
						firstFailure = r.Scheduled
					}
					if changed && !healthy {
						flip = r.Scheduled
					}
					if tc.pacing {
						s.SetPace(r.Key, tr.Pace())
					}
				}})
				_ = s.Add("a", Job{Prober: prober, Target: fakeTarget, Period: period, FastPeriod: fast})
				stop := start(t, s)
				time.Sleep(6 * time.Second)
				stop()

				mu.Lock()
				defer mu.Unlock()
				if flip.IsZero() {
					t.Fatal("the verdict never flipped")
				}
				if got := flip.Sub(firstFailure); got != tc.flip {
					t.Errorf("unhealthy %v after the first failure, want %v", got, tc.flip)
				}
				if got := flip.Sub(t0.Add(broken)); tc.pacing && got > period+2*fast {
					t.Errorf("unhealthy %v after the break, want at most %v", got, period+2*fast)
				}
			})
		})
	}
}

func TestPaceNextTick(t *testing.T) {
	for _, tc := range []struct{ a, b, floor int64 }{
		{7, 3, 2}, {6, 3, 2}, {0, 3, 0}, {-1, 3, -1}, {-3, 3, -1}, {-4, 3, -2},
	} {
		if got := floorDiv(tc.a, tc.b); got != tc.floor {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.floor)
		}
	}
	// On the grid 500 + k×100, before and after the anchor.
	for _, tc := range []struct{ after, want int64 }{
		{500, 600}, {599, 600}, {600, 700}, {250, 300}, {300, 400}, {-50, 0}, {-100, 0},
	} {
		if got := nextTick(500, 100, tc.after); got != tc.want {
			t.Errorf("nextTick(500, 100, %d) = %d, want %d", tc.after, got, tc.want)
		}
	}
}
