package probes_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/swh-dev/swh/probes"
)

// A key paced by its Tracker: while its results disagree with the verdict
// it is probed every FastPeriod, so that the third failure comes 10ms after
// the first instead of two periods; while it is down, every DownPeriod. The
// due times stay on the Period and DownPeriod grids of the first probe, so
// keys added together are probed together whatever their paces.
func ExampleScheduler_SetPace() {
	script := []probes.Status{probes.Success, probes.Failure, probes.Failure, probes.Failure, probes.Failure, probes.Success, probes.Success}
	var calls atomic.Int32
	prober := probes.ProberFunc(func(context.Context, probes.Target) probes.Result {
		n := int(calls.Add(1)) - 1
		if n < len(script) && script[n] == probes.Failure {
			return probes.Result{Status: probes.Failure, Reason: probes.ReasonRefused, Message: "refused"}
		}
		return probes.Result{Status: probes.Success, Reason: probes.ReasonOK, Message: "ok"}
	})

	tr, err := probes.NewTracker(probes.TrackerConfig{SuccessThreshold: 2, FailureThreshold: 3, InitialHealthy: true})
	if err != nil {
		panic(err)
	}
	var s *probes.Scheduler[string]
	lines := make(chan string)
	s, err = probes.NewScheduler(probes.SchedulerOptions[string]{
		OnResult: func(r probes.Report[string]) {
			healthy, _ := tr.Observe(r.Result.Status)
			// The pace decides when the key's next probe is due.
			s.SetPace(r.Key, tr.Pace())
			lines <- fmt.Sprintf("%s: healthy=%v pace=%s", r.Result.Status, healthy, tr.Pace())
		},
		NoJitter: true,
	})
	if err != nil {
		panic(err)
	}
	job := probes.Job{
		Prober:     prober,
		Target:     probes.Target{Host: "127.0.0.1", Port: 8080},
		Period:     20 * time.Millisecond,
		FastPeriod: 5 * time.Millisecond,  // HAProxy's fastinter
		DownPeriod: 40 * time.Millisecond, // HAProxy's downinter
		Timeout:    time.Second,
	}
	if err := s.Add("web-0", job); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	for range script {
		fmt.Println(<-lines)
	}
	cancel()
	go func() { // a result may be on its way while Run stops
		for range lines {
		}
	}()
	<-done
	close(lines)
	// Output:
	// success: healthy=true pace=steady
	// failure: healthy=true pace=changing
	// failure: healthy=true pace=changing
	// failure: healthy=false pace=down
	// failure: healthy=false pace=down
	// success: healthy=false pace=changing
	// success: healthy=true pace=steady
}

// A Tracker's pace through a target's results: steady while the verdict
// holds, changing while results disagree with it, down while a target that
// was healthy fails. A target that never passed stays steady, so that its
// first pass is not put off.
func ExampleTracker_Pace() {
	tr, err := probes.NewTracker(probes.TrackerConfig{SuccessThreshold: 2, FailureThreshold: 2})
	if err != nil {
		panic(err)
	}
	for _, r := range "FSSFFFSF" {
		s := map[rune]probes.Status{'S': probes.Success, 'F': probes.Failure}[r]
		healthy, _ := tr.Observe(s)
		fmt.Printf("%s: healthy=%v pace=%s\n", s, healthy, tr.Pace())
	}
	// Output:
	// failure: healthy=false pace=steady
	// success: healthy=false pace=changing
	// success: healthy=true pace=steady
	// failure: healthy=true pace=changing
	// failure: healthy=false pace=down
	// failure: healthy=false pace=down
	// success: healthy=false pace=changing
	// failure: healthy=false pace=down
}
