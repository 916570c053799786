package probes

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestSchedulerNoisyNeighbour runs, on real sockets on loopback, a group
// (a tenant) whose HTTP probes hang against a server that accepts and never
// answers, with timeouts of an hour, four times as many as there are slots,
// beside another group's TCP probe: the noisy group holds no more than its
// bound, and the other group's probe still runs (without the bound it never
// runs at all). The real clock on a loaded machine may make the quiet probe
// skip a tick: that is counted in the figure, not failed; the exact lags are
// TestSchedulerGroupBound's, in fake time.
func TestSchedulerNoisyNeighbour(t *testing.T) {
	n := neighbours{maxConcurrent: 8, perGroup: 4, noisyKeys: 32, noisyTimeout: time.Hour, quietPeriod: 200 * time.Millisecond, quietProbes: 10}
	got, noisy := n.run(t, 30*time.Second)
	if noisy.maxInFlight != n.perGroup {
		t.Errorf("the noisy group had %d probes in flight at most, want its bound, %d", noisy.maxInFlight, n.perGroup)
	}
	if noisy.started != n.perGroup {
		t.Errorf("%d noisy probes started, want %d: the others wait for the hanging ones", noisy.started, n.perGroup)
	}
	skipped := 0
	for i, r := range got {
		if r.Result.Status != Success {
			t.Errorf("quiet probe %d: %v", i, r.Result)
		}
		if i > 0 {
			skipped += int(r.Scheduled.Sub(got[i-1].Scheduled)/n.quietPeriod) - 1
		}
	}
	lags := lagsOf(got)
	t.Logf("figure: beside %d noisy keys hanging (%d in flight), the quiet key's %d probes started %v late at the median, %v at worst, %d ticks skipped (period %v)",
		n.noisyKeys, noisy.maxInFlight, len(got), lags[len(lags)/2], lags[len(lags)-1], skipped, n.quietPeriod)
}

// BenchmarkSchedulerNoisyNeighbour shows side by side the lag of a quiet
// group's probe beside a noisy group whose 32 HTTP probes hang for their
// full timeout (1 s, their period) against a server that never answers,
// with 8 slots: unbounded, and with the noisy group bounded to 4. One op is
// one probe of the quiet key (period 100ms); skipped-ticks counts the ticks
// its probe missed for waiting more than a period.
func BenchmarkSchedulerNoisyNeighbour(b *testing.B) {
	for _, perGroup := range []int{0, 4} {
		name := "unbounded"
		if perGroup > 0 {
			name = fmt.Sprintf("per-group-%d", perGroup)
		}
		b.Run(name, func(b *testing.B) {
			n := neighbours{maxConcurrent: 8, perGroup: perGroup, noisyKeys: 32, noisyTimeout: time.Second, quietPeriod: 100 * time.Millisecond, quietProbes: b.N}
			got, _ := n.run(b, time.Duration(b.N+10)*10*time.Second)
			lags := lagsOf(got)
			skipped := 0
			for i, r := range got[1:] {
				skipped += int(r.Scheduled.Sub(got[i].Scheduled)/n.quietPeriod) - 1
			}
			b.ReportMetric(float64(lags[len(lags)/2].Microseconds()), "lag-p50-µs")
			b.ReportMetric(float64(lags[len(lags)-1].Microseconds()), "lag-max-µs")
			b.ReportMetric(float64(skipped), "skipped-ticks")
		})
	}
}

// neighbours is a noisy group of keys whose HTTP probes hang against a
// server that accepts and never answers, and a quiet group of one key
// whose TCP probes pass at once, on loopback, in one Scheduler.
type neighbours struct {
	maxConcurrent, perGroup int
	noisyKeys               int
	noisyTimeout            time.Duration // and period
	quietPeriod             time.Duration
	quietProbes             int
}

// noisyCounts is what the noisy group's probes did.
type noisyCounts struct{ maxInFlight, started int }

// run starts the noisy group, then, once it holds what it can, the quiet
// one, and returns the quiet key's first quietProbes reports.
func (n neighbours) run(tb testing.TB, deadline time.Duration) ([]Report[string], noisyCounts) {
	tb.Helper()
	silent := silentListener(tb, "tcp4", "127.0.0.1")
	accepting := listen(tb, "tcp4", "127.0.0.1")
	serve(tb, accepting, func(c net.Conn) { c.Close() })
	httpProber, err := NewHTTP(HTTPConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	var inFlight, maxInFlight, started atomic.Int32
	noisy := ProberFunc(func(ctx context.Context, target Target) Result {
		started.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		return httpProber.Probe(ctx, target)
	})
	tcp, _ := NewTCP(TCPConfig{})

	quiet := make(chan Report[string], n.quietProbes)
	s, err := NewScheduler(SchedulerOptions[string]{
		OnResult: func(r Report[string]) {
			if r.Key == "quiet" {
				select {
				case quiet <- r:
				default: // enough
				}
			}
		},
		MaxConcurrent:         n.maxConcurrent,
		MaxConcurrentPerGroup: n.perGroup,
		NoJitter:              true,
	})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n.noisyKeys {
		if err := s.Add(fmt.Sprintf("noisy-%d", i), Job{Prober: noisy, Target: silent, Period: n.noisyTimeout, Timeout: n.noisyTimeout, Group: "noisy"}); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = s.Run(ctx)
	}()
	defer func() { cancel(); <-stopped }()
	holds := n.perGroup
	if holds == 0 {
		holds = n.maxConcurrent
	}
	waitFor(tb, "the noisy probes to start", func() bool { return int(started.Load()) >= holds })
	// A timeout longer than the period: a loaded machine must not turn
	// the quiet probe into a failure; only the slots are under test.
	if err := s.Add("quiet", Job{Prober: tcp, Target: targetOf(tb, accepting), Period: n.quietPeriod, Timeout: 5 * time.Second, Group: "quiet"}); err != nil {
		tb.Fatal(err)
	}

	var got []Report[string]
	timeout := time.After(deadline)
	for len(got) < n.quietProbes {
		select {
		case r := <-quiet:
			got = append(got, r)
		case <-timeout:
			tb.Fatalf("the quiet group's probe ran %d times in %v at a %v period; the noisy one holds %d probes in flight", len(got), deadline, n.quietPeriod, inFlight.Load())
		}
	}
	return got, noisyCounts{maxInFlight: int(maxInFlight.Load()), started: int(started.Load())}
}

// lagsOf returns the scheduling lags of reports, sorted.
func lagsOf(reports []Report[string]) []time.Duration {
	lags := make([]time.Duration, len(reports))
	for i, r := range reports {
		lags[i] = r.Started.Sub(r.Scheduled)
	}
	slices.Sort(lags)
	return lags
}

// waitFor waits until cond holds, polling, for at most 30s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestSchedulerGroupBound checks the bound of a group's probes in flight
// in fake time, where lags are exact: a group with more due probes than its
// bound runs them its bound at a time, and waits; another group's probes,
// due at the same moment, start at once.
func TestSchedulerGroupBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			c        collector[string]
			mu       sync.Mutex
			inFlight = map[string]int{}
			maxSeen  = map[string]int{}
		)
		counted := func(group string) Prober {
			return ProberFunc(func(ctx context.Context, target Target) Result {
				mu.Lock()
				inFlight[group]++
				maxSeen[group] = max(maxSeen[group], inFlight[group])
				mu.Unlock()
				defer func() {
					mu.Lock()
					inFlight[group]--
					mu.Unlock()
				}()
				return sleeper(100*time.Millisecond).Probe(ctx, target)
			})
		}
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true, MaxConcurrent: 10, MaxConcurrentPerGroup: 3})
		for i := range 9 {
			_ = s.Add(fmt.Sprint("a", i), Job{Prober: counted("a"), Target: fakeTarget, Period: 10 * time.Second, Group: "a"})
		}
		for i := range 3 {
			_ = s.Add(fmt.Sprint("b", i), Job{Prober: counted("b"), Target: fakeTarget, Period: 10 * time.Second, Group: "b"})
		}
		stop := start(t, s)
		time.Sleep(time.Second)
		stop()

		if maxSeen["a"] != 3 || maxSeen["b"] != 3 {
			t.Errorf("at most %v probes in flight per group, want 3 each", maxSeen)
		}
		lags := map[string][]time.Duration{}
		for _, r := range c.reports {
			lags[r.Key[:1]] = append(lags[r.Key[:1]], r.Started.Sub(r.Scheduled))
		}
		for _, l := range lags {
			slices.Sort(l)
		}
		// Nine probes of a, three at a time, 100ms each; b's three at once.
		if got := fmt.Sprint(lags); got != "map[a:[0s 0s 0s 100ms 100ms 100ms 200ms 200ms 200ms] b:[0s 0s 0s]]" {
			t.Errorf("lags %s", got)
		}
	})
}

// TestSchedulerGroupChanges moves keys between groups and removes them,
// idle and while their probes run: the slots follow, and a group goes once
// it has neither keys nor probes running.
func TestSchedulerGroupChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c collector[string]
		hang := sleeper(time.Hour)
		s := newScheduler(t, SchedulerOptions[string]{OnResult: c.add, NoJitter: true, MaxConcurrent: 10, MaxConcurrentPerGroup: 1})
		job := func(group string, p Prober) Job {
			return Job{Prober: p, Target: fakeTarget, Period: time.Hour, Timeout: time.Hour, Group: group}
		}
		_ = s.Add("running", job("a", hang))
		_ = s.Add("waiting", job("a", instant(Success)))
		stop := start(t, s)
		defer stop()
		synctest.Wait()
		if n := c.count(); n != 0 {
			t.Fatalf("%d reports while group a's slot is held", n)
		}
		// Moving the running key to b frees a's slot once its probe is
		// canceled; the waiting key of a runs then. The moved key, due
		// again a moment later, probes in b.
		moved := job("b", hang)
		moved.Period = time.Millisecond
		_ = s.Update("running", moved)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if got := c.of("waiting"); len(got) != 1 {
			t.Fatalf("the waiting key of a ran %d times after the other left a", len(got))
		}
		groups := func() string {
			s.mu.Lock()
			defer s.mu.Unlock()
			var out []string
			for name, g := range s.groups {
				out = append(out, fmt.Sprintf("%s:%d/%d", name, g.keys, g.inFlight))
			}
			slices.Sort(out)
			return fmt.Sprint(out)
		}
		// running (moved, probing again) in b; waiting, idle, in a.
		if got := groups(); got != "[a:1/0 b:1/1]" {
			t.Errorf("groups (keys/in flight) %s, want [a:1/0 b:1/1]", got)
		}
		// An idle key moved, then both removed, one idle, one probing:
		// no group is left.
		_ = s.Update("waiting", job("c", instant(Success)))
		if got := groups(); got != "[b:1/1 c:1/0]" {
			t.Errorf("groups %s after moving the idle key, want [b:1/1 c:1/0]", got)
		}
		s.Remove("waiting")
		s.Remove("running")
		synctest.Wait()
		if got := groups(); got != "[]" {
			t.Errorf("groups %s after removing every key", got)
		}
	})
}
