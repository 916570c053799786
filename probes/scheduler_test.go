package probes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The scheduler tests run in synctest bubbles: time is fake and advances
// only when every goroutine is blocked, so periods, delays and lags are
// exact and the tests take no wall-clock time. The probers are functions.

var fakeTarget = Target{Host: "127.0.0.1", Port: 1}

func instant(status Status) Prober {
	return ProberFunc(func(context.Context, Target) Result {
		return Result{Status: status, Reason: ReasonOK, Message: "instant"}
	})
}

// sleeper takes d, or until its context ends.
func sleeper(d time.Duration) Prober {
	return ProberFunc(func(ctx context.Context, _ Target) Result {
		start := time.Now()
		select {
		case <-time.After(d):
			return Result{Status: Success, Reason: ReasonOK, Message: "slept", Latency: time.Since(start)}
		case <-ctx.Done():
			return Result{Status: Failure, Reason: ReasonTimeout, Message: "cut short", Err: ctx.Err(), Latency: time.Since(start)}
		}
	})
}

type collector[K comparable] struct {
	mu      sync.Mutex
	reports []Report[K]
}

func (c *collector[K]) add(r Report[K]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reports = append(c.reports, r)
}

func (c *collector[K]) of(key K) []Report[K] {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Report[K]
	for _, r := range c.reports {
		if r.Key == key {
			out = append(out, r)
		}
	}
	return out
}

func (c *collector[K]) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reports)
}

// start runs s until the returned stop is called; stop checks Run's result.
func start[K comparable](t *testing.T, s *Scheduler[K]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func newScheduler[K comparable](t *testing.T, opts SchedulerOptions[K]) *Scheduler[K] {
	t.Helper()
	s, err := NewScheduler(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// offsets returns when each report was due, relative to t0.
func offsets[K comparable](reports []Report[K], t0 time.Time) []time.Duration {
	out := make([]time.Duration, len(reports))
	for i, r := range reports {
		out[i] = r.Scheduled.Sub(t0)
	}
	return out
}

func TestSchedulerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[string]
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true})
		t0 := time.Now()
		if err := s.Add("a", Job{Prober: instant(Success), Target: fakeTarget, Period: 100 * time.Millisecond, InitialDelay: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		stop := start(t, s)
		time.Sleep(time.Second)
		stop()

		got := c.of("a")
		if fmt.Sprint(offsets(got, t0)) != "[50ms 150ms 250ms 350ms 450ms 550ms 650ms 750ms 850ms 950ms]" {
			t.Errorf("due at %v", offsets(got, t0))
		}
		for _, r := range got {
			if !r.Started.Equal(r.Scheduled) || r.Target != fakeTarget || !r.Result.Passed() {
				t.Errorf("report %+v", r)
			}
		}
	})
}

func TestSchedulerJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[int]
		s := newScheduler(t, SchedulerOptions[int]{OnResult: c.add})
		t0 := time.Now()
		const keys = 200
		for k := range keys {
			if err := s.Add(k, Job{Prober: instant(Success), Target: fakeTarget, Period: time.Second, InitialDelay: 2 * time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		stop := start(t, s)
		// A little past the first period: the loop may wake a couple of
		// milliseconds late, so a probe due just before 3 s runs just after.
		time.Sleep(3*time.Second + 50*time.Millisecond)
		stop()

		first := map[time.Duration]bool{}
		lo, hi := time.Hour, time.Duration(0)
		for k := range keys {
			var got []Report[int]
			for _, r := range c.of(k) {
				if r.Scheduled.Sub(t0) < 3*time.Second {
					got = append(got, r)
				}
			}
			if len(got) != 1 {
				t.Fatalf("key %d: %d reports due in the first period after the delay", k, len(got))
			}
			d := got[0].Scheduled.Sub(t0)
			first[d] = true
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < 2*time.Second || hi >= 3*time.Second {
			t.Errorf("first probes between %v and %v, want within [2s, 3s)", lo, hi)
		}
		if len(first) < keys*3/4 || lo > 2200*time.Millisecond || hi < 2800*time.Millisecond {
			t.Errorf("first probes not spread: %d distinct times between %v and %v", len(first), lo, hi)
		}
	})
}

func TestSchedulerNoOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			c                 collector[string]
			inFlight, maxSeen atomic.Int32
		)
		slow := ProberFunc(func(ctx context.Context, target Target) Result {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			if n > maxSeen.Load() {
				maxSeen.Store(n)
			}
			return sleeper(250*time.Millisecond).Probe(ctx, target)
		})
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true})
		t0 := time.Now()
		_ = s.Add("slow", Job{Prober: slow, Target: fakeTarget, Period: 100 * time.Millisecond, Timeout: time.Second})
		stop := start(t, s)
		time.Sleep(990 * time.Millisecond)
		stop()

		if maxSeen.Load() != 1 {
			t.Errorf("%d probes of one key ran at once", maxSeen.Load())
		}
		// Each probe covers two or three ticks: the next starts when it
		// ends, as of the last tick it covered. (The fourth, started at
		// 750ms, is cut short by the shutdown and not reported.)
		got := c.of("slow")
		if fmt.Sprint(offsets(got, t0)) != "[0s 200ms 500ms]" {
			t.Errorf("due at %v", offsets(got, t0))
		}
		for i, r := range got[1:] {
			if !r.Started.Equal(got[i].Started.Add(250 * time.Millisecond)) {
				t.Errorf("probe %d started %v after the previous one, want 250ms", i+1, r.Started.Sub(got[i].Started))
			}
		}
	})
}

func TestSchedulerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[string]
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true})
		hang := sleeper(time.Hour)
		_ = s.Add("explicit", Job{Prober: hang, Target: fakeTarget, Period: 10 * time.Second, Timeout: 30 * time.Millisecond})
		_ = s.Add("short period", Job{Prober: hang, Target: fakeTarget, Period: 500 * time.Millisecond})
		_ = s.Add("long period", Job{Prober: hang, Target: fakeTarget, Period: 10 * time.Second})
		stop := start(t, s)
		time.Sleep(5200 * time.Millisecond)
		stop()

		for key, want := range map[string]time.Duration{"explicit": 30 * time.Millisecond, "short period": 500 * time.Millisecond, "long period": DefaultTimeout} {
			got := c.of(key)
			if len(got) == 0 {
				t.Fatalf("%s: no report", key)
			}
			r := got[0]
			if r.Result.Reason != ReasonTimeout || !errors.Is(r.Result.Err, context.DeadlineExceeded) {
				t.Errorf("%s: result %v", key, r.Result)
			}
			if r.Result.Latency != want {
				t.Errorf("%s: timed out after %v, want %v", key, r.Result.Latency, want)
			}
		}
		// A probe that times out after a full period is followed at
		// once by the next.
		if n := len(c.of("short period")); n != 10 {
			t.Errorf("%d probes in 5s at a 500ms period", n)
		}
	})
}

func TestSchedulerConcurrencyLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			c                 collector[int]
			inFlight, maxSeen atomic.Int32
		)
		counted := ProberFunc(func(ctx context.Context, target Target) Result {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			if n > maxSeen.Load() {
				maxSeen.Store(n)
			}
			return sleeper(100*time.Millisecond).Probe(ctx, target)
		})
		s := newScheduler(t, SchedulerOptions[int]{OnResult: c.add, NoJitter: true, MaxConcurrent: 3})
		for k := range 10 {
			_ = s.Add(k, Job{Prober: counted, Target: fakeTarget, Period: 10 * time.Second})
		}
		stop := start(t, s)
		time.Sleep(2 * time.Second)
		stop()

		if maxSeen.Load() != 3 {
			t.Errorf("at most %d probes ran at once, want 3", maxSeen.Load())
		}
		if c.count() != 10 {
			t.Fatalf("%d reports", c.count())
		}
		// Ten probes due together, three at a time, 100ms each: the last
		// waits 300ms for a slot.
		var worst time.Duration
		for k := range 10 {
			worst = max(worst, c.of(k)[0].Started.Sub(c.of(k)[0].Scheduled))
		}
		if worst != 300*time.Millisecond {
			t.Errorf("worst lag %v, want 300ms", worst)
		}
	})
}

func TestSchedulerAddUpdateRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[string]
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true})
		t0 := time.Now()
		job := Job{Prober: instant(Success), Target: fakeTarget, Period: 100 * time.Millisecond}
		_ = s.Add("a", job)
		_ = s.Add("b", job)
		_ = s.Add("c", job)
		stop := start(t, s)

		time.Sleep(250 * time.Millisecond)
		if !s.Remove("b") || s.Remove("b") || s.Len() != 2 {
			t.Error("Remove or Len is wrong")
		}
		slower := job
		slower.Period = 200 * time.Millisecond
		slower.Prober = instant(Failure)
		if err := s.Update("c", slower); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
		_ = s.Add("d", job) // added while running
		time.Sleep(710 * time.Millisecond)
		stop()

		for key, want := range map[string]string{
			"a": "[0s 100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms]", // undisturbed
			"b": "[0s 100ms 200ms]",
			"c": "[0s 100ms 200ms 400ms 600ms 800ms]", // one new period after the last probe
			"d": "[280ms 380ms 480ms 580ms 680ms 780ms 880ms 980ms]",
		} {
			if got := fmt.Sprint(offsets(c.of(key), t0)); got != want {
				t.Errorf("%s: due at %s, want %s", key, got, want)
			}
		}
		for _, r := range c.of("c")[3:] {
			if r.Result.Status != Failure {
				t.Errorf("c after Update: %v, want the new prober's failure", r.Result)
			}
		}
	})
}

func TestSchedulerChangesDuringProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[string]
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true})
		t0 := time.Now()
		slow := Job{Prober: sleeper(200 * time.Millisecond), Target: fakeTarget, Period: time.Second}
		_ = s.Add("updated", slow)
		_ = s.Add("removed", slow)
		stop := start(t, s)

		time.Sleep(100 * time.Millisecond) // both probes are running
		fast := Job{Prober: instant(Failure), Target: fakeTarget, Period: 500 * time.Millisecond}
		_ = s.Update("updated", fast)
		s.Remove("removed")
		time.Sleep(2 * time.Second)
		stop()

		// The result of the probe running at Update is dropped; the new
		// job continues one new period after the old probe was due.
		got := c.of("updated")
		if fmt.Sprint(offsets(got, t0)) != "[500ms 1s 1.5s 2s]" {
			t.Errorf("updated: due at %v", offsets(got, t0))
		}
		for _, r := range got {
			if r.Result.Status != Failure {
				t.Errorf("a result of the old job was delivered: %v", r.Result)
			}
		}
		if n := len(c.of("removed")); n != 0 {
			t.Errorf("%d results delivered for a key removed during its probe", n)
		}
	})
}

func TestSchedulerCallbacksInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			c         collector[string]
			inFlight  atomic.Int32
			overlap   atomic.Bool
			lastStart time.Time
		)
		s := newScheduler(t, SchedulerOptions[string]{NoJitter: true, OnResult: func(r Report[string]) {
			if inFlight.Add(1) > 1 || !r.Started.After(lastStart) && !lastStart.IsZero() {
				overlap.Store(true)
			}
			lastStart = r.Started
			time.Sleep(250 * time.Millisecond) // a slow consumer, slower than the period
			inFlight.Add(-1)
			c.add(r)
		}})
		_ = s.Add("a", Job{Prober: instant(Success), Target: fakeTarget, Period: 100 * time.Millisecond})
		stop := start(t, s)
		time.Sleep(990 * time.Millisecond)
		stop()
		if overlap.Load() {
			t.Error("OnResult calls of one key overlapped or came out of order")
		}
		if n := c.count(); n != 4 { // at 0, 250, 500 and 750ms
			t.Errorf("%d results", n)
		}
	})
}

func TestSchedulerShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			c        collector[int]
			canceled atomic.Int32
		)
		hang := ProberFunc(func(ctx context.Context, _ Target) Result {
			<-ctx.Done()
			if errors.Is(ctx.Err(), context.Canceled) {
				canceled.Add(1)
			}
			return Result{Status: Failure, Reason: ReasonCanceled, Message: "canceled"}
		})
		s := newScheduler(t, SchedulerOptions[int]{OnResult: c.add, NoJitter: true})
		for k := range 5 {
			_ = s.Add(k, Job{Prober: hang, Target: fakeTarget, Period: time.Second, Timeout: time.Hour})
		}
		stop := start(t, s)
		time.Sleep(100 * time.Millisecond)
		stop() // returns only once every probe has ended
		if canceled.Load() != 5 {
			t.Errorf("%d probes saw the shutdown, want 5", canceled.Load())
		}
		if c.count() != 0 {
			t.Errorf("%d results of canceled probes delivered", c.count())
		}
		// synctest.Test fails if any goroutine is left.
	})
}

func TestSchedulerErrors(t *testing.T) {
	if _, err := NewScheduler(SchedulerOptions[int]{}); err == nil {
		t.Error("a scheduler without OnResult")
	}
	if _, err := NewScheduler(SchedulerOptions[int]{OnResult: func(Report[int]) {}, MaxConcurrent: -1}); err == nil {
		t.Error("a negative MaxConcurrent")
	}
	for _, opts := range []SchedulerOptions[int]{
		{MaxConcurrentPerGroup: -1},
		{MaxConcurrent: 10, MaxConcurrentPerGroup: 11},
		{MaxConcurrentPerGroup: DefaultMaxConcurrent + 1},
	} {
		opts.OnResult = func(Report[int]) {}
		if _, err := NewScheduler(opts); err == nil || !strings.Contains(err.Error(), "MaxConcurrentPerGroup") {
			t.Errorf("MaxConcurrent %d, MaxConcurrentPerGroup %d: %v, want an error naming MaxConcurrentPerGroup", opts.MaxConcurrent, opts.MaxConcurrentPerGroup, err)
		}
	}
	s := newScheduler(t, SchedulerOptions[int]{OnResult: func(Report[int]) {}})
	ok := Job{Prober: instant(Success), Target: fakeTarget, Period: time.Second}
	for name, job := range map[string]Job{
		"no prober":      {Target: fakeTarget, Period: time.Second},
		"no period":      {Prober: ok.Prober, Target: fakeTarget},
		"negative delay": {Prober: ok.Prober, Target: fakeTarget, Period: time.Second, InitialDelay: -1},
		"bad target":     {Prober: ok.Prober, Target: Target{Host: "x"}, Period: time.Second},
	} {
		if s.Add(1, job) == nil {
			t.Errorf("Add accepted a job with %s", name)
		}
	}
	if err := s.Add(1, ok); err != nil {
		t.Fatal(err)
	}
	if s.Add(1, ok) == nil {
		t.Error("Add accepted an existing key")
	}
	if s.Update(2, ok) == nil || s.Update(1, Job{}) == nil {
		t.Error("Update accepted an unknown key or an invalid job")
	}
	if s.Remove(2) {
		t.Error("Remove found an unknown key")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Run(ctx) == nil {
		t.Error("Run ran twice")
	}
}

// TestSchedulerManyKeys runs 10,000 keys at a 1s period for 3.5 seconds.
func TestSchedulerManyKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			counts = map[int]int{}
			lagged int
		)
		s := newScheduler(t, SchedulerOptions[int]{OnResult: func(r Report[int]) {
			mu.Lock()
			defer mu.Unlock()
			counts[r.Key]++
			// The loop sleeps at least minSleep: probes due closer
			// together than that start together.
			if lag := r.Started.Sub(r.Scheduled); lag < 0 || lag > minSleep {
				lagged++
			}
		}})
		const keys = 10000
		for k := range keys {
			if err := s.Add(k, Job{Prober: instant(Success), Target: fakeTarget, Period: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		stop := start(t, s)
		time.Sleep(3500 * time.Millisecond)
		stop()
		mu.Lock()
		defer mu.Unlock()
		for k := range keys {
			// First due in [0, 1s), then every second: 3 or 4 times.
			if counts[k] != 3 && counts[k] != 4 {
				t.Fatalf("key %d probed %d times in 3.5 periods", k, counts[k])
			}
		}
		if lagged != 0 {
			t.Errorf("%d probes started more than %v late", lagged, minSleep)
		}
	})
}

func TestSchedulerCancelsOnRemoveAndUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu    sync.Mutex
			ended = map[string]time.Duration{}
		)
		t0 := time.Now()
		recording := func(name string) Prober {
			return ProberFunc(func(ctx context.Context, _ Target) Result {
				<-ctx.Done()
				mu.Lock()
				ended[name] = time.Since(t0)
				mu.Unlock()
				return Result{Status: Failure, Reason: ReasonCanceled, Message: "ended"}
			})
		}
		s := newScheduler(t, SchedulerOptions[string]{OnResult: func(Report[string]) {}, NoJitter: true})
		_ = s.Add("removed", Job{Prober: recording("removed"), Target: fakeTarget, Period: time.Minute, Timeout: time.Minute})
		_ = s.Add("updated", Job{Prober: recording("updated"), Target: fakeTarget, Period: time.Minute, Timeout: time.Minute})
		_ = s.Add("kept", Job{Prober: recording("kept"), Target: fakeTarget, Period: time.Minute, Timeout: time.Minute})
		stop := start(t, s)
		time.Sleep(100 * time.Millisecond)
		s.Remove("removed")
		_ = s.Update("updated", Job{Prober: instant(Success), Target: fakeTarget, Period: time.Minute})
		time.Sleep(100 * time.Millisecond)
		stop()
		mu.Lock()
		defer mu.Unlock()
		if ended["removed"] != 100*time.Millisecond || ended["updated"] != 100*time.Millisecond || ended["kept"] != 200*time.Millisecond {
			t.Errorf("probes ended at %v; want the removed and updated ones canceled at once, the other at shutdown", ended)
		}
	})
}

// TestSchedulerCutsMessages bounds the message of any Prober's result, so
// that OnResult can store, log or publish it as it is.
func TestSchedulerCutsMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[string]
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true})
		long := ProberFunc(func(context.Context, Target) Result {
			return Result{Status: Failure, Reason: ReasonError, Message: "bad\x00line\n" + string(make([]byte, 100_000))}
		})
		if err := s.Add("a", Job{Prober: long, Target: fakeTarget, Period: time.Second}); err != nil {
			t.Fatal(err)
		}
		stop := start(t, s)
		time.Sleep(500 * time.Millisecond)
		stop()
		got := c.of("a")
		if len(got) != 1 {
			t.Fatalf("%d reports", len(got))
		}
		if msg := got[0].Result.Message; len(msg) > MaxMessageBytes || !strings.HasPrefix(msg, "bad line ") || !strings.HasSuffix(msg, "…") {
			t.Errorf("message of %d bytes: %.20q…%q", len(msg), msg, msg[max(0, len(msg)-6):])
		}
	})
}
