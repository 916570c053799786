package probes

import "fmt"

// TrackerConfig configures a Tracker. The zero value gives kubelet's
// readiness defaults: one success to become healthy, three failures to
// become unhealthy, starting unhealthy.
type TrackerConfig struct {
	// SuccessThreshold is how many consecutive successes make an unhealthy
	// target healthy; 0 means 1.
	SuccessThreshold int
	// FailureThreshold is how many consecutive failures make a healthy
	// target unhealthy; 0 means 3.
	FailureThreshold int
	// InitialHealthy is the state before any result. Starting unhealthy is
	// the safe default for traffic; starting healthy suits a target known
	// to be serving already (after a restart of the prober, say), so that
	// it keeps its traffic until probes say otherwise.
	InitialHealthy bool
}

// Tracker turns a stream of probe results into a healthy/unhealthy state
// with hysteresis: the state flips only after enough consecutive results
// disagree with it. It is not safe for concurrent use; the Scheduler
// delivers the results of one key one at a time, so one Tracker per key
// needs no lock.
type Tracker struct {
	successThreshold int
	failureThreshold int
	healthy          bool
	wasHealthy       bool // healthy now or at any time before (InitialHealthy counts)
	successes        int  // consecutive, saturated at the threshold
	failures         int
}

// NewTracker validates cfg and returns a Tracker in its initial state.
func NewTracker(cfg TrackerConfig) (*Tracker, error) {
	if cfg.SuccessThreshold < 0 || cfg.FailureThreshold < 0 {
		return nil, fmt.Errorf("probes: tracker thresholds must not be negative (success %d, failure %d)",
			cfg.SuccessThreshold, cfg.FailureThreshold)
	}
	t := &Tracker{successThreshold: cfg.SuccessThreshold, failureThreshold: cfg.FailureThreshold, healthy: cfg.InitialHealthy, wasHealthy: cfg.InitialHealthy}
	if t.successThreshold == 0 {
		t.successThreshold = 1
	}
	if t.failureThreshold == 0 {
		t.failureThreshold = 3
	}
	return t, nil
}

// Observe records one result and returns the state after it, and whether
// that result changed it. Unknown is ignored.
func (t *Tracker) Observe(s Status) (healthy, changed bool) {
	switch s {
	case Success:
		t.failures = 0
		t.successes = min(t.successes+1, t.successThreshold)
		if !t.healthy && t.successes >= t.successThreshold {
			t.healthy, changed = true, true
			t.wasHealthy = true
		}
	case Failure:
		t.successes = 0
		t.failures = min(t.failures+1, t.failureThreshold)
		if t.healthy && t.failures >= t.failureThreshold {
			t.healthy, changed = false, true
		}
	}
	return t.healthy, changed
}

// Healthy returns the current state.
func (t *Tracker) Healthy() bool { return t.healthy }

// Reset forgets the results counted and sets the state, as a new Tracker
// of the same thresholds starting there would be; a healthy state counts
// as having been healthy (see Pace). A prober that kept a target's
// verdict while its own results could not be trusted uses it to go on
// from the verdict it kept.
func (t *Tracker) Reset(healthy bool) {
	t.healthy, t.successes, t.failures = healthy, 0, 0
	t.wasHealthy = t.wasHealthy || healthy
}

// Pace is how often a target should be probed for its verdict, as HAProxy's
// inter, fastinter and downinter: Tracker.Pace gives it from the results so
// far, and Scheduler.SetPace applies it to a key.
type Pace uint8

const (
	// PaceSteady probes every Job.Period: the verdict is settled.
	PaceSteady Pace = iota
	// PaceChanging probes every Job.FastPeriod: the results disagree with
	// the verdict, so the next ones decide it sooner.
	PaceChanging
	// PaceDown probes every Job.DownPeriod: a target that was serving is
	// down, and probing it as often as a healthy one buys little.
	PaceDown
)

func (p Pace) String() string {
	switch p {
	case PaceSteady:
		return "steady"
	case PaceChanging:
		return "changing"
	case PaceDown:
		return "down"
	}
	return fmt.Sprintf("Pace(%d)", uint8(p))
}

// Pace returns the pace the results so far call for: PaceChanging while
// the verdict is changing (healthy with failures counted, or unhealthy
// with successes counted, the threshold not reached yet), PaceDown while a
// target that was healthy before (or started healthy) is unhealthy with no
// success counted, and PaceSteady otherwise.
func (t *Tracker) Pace() Pace {
	switch {
	case t.healthy && t.failures > 0, !t.healthy && t.successes > 0:
		// The next results decide the verdict: have them soon, so that
		// a failing target loses its traffic (or a recovering one gets
		// it back) in a few fast periods rather than thresholds × Period.
		return PaceChanging
	case !t.healthy && t.wasHealthy:
		return PaceDown
	default:
		// Healthy and passing, or never healthy yet: a starting pod keeps
		// the normal period, so that its first pass is not put off by a
		// slow down period.
		return PaceSteady
	}
}
