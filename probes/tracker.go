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
	successes        int // consecutive, saturated at the threshold
	failures         int
}

// NewTracker validates cfg and returns a Tracker in its initial state.
func NewTracker(cfg TrackerConfig) (*Tracker, error) {
	if cfg.SuccessThreshold < 0 || cfg.FailureThreshold < 0 {
		return nil, fmt.Errorf("probes: tracker thresholds must not be negative (success %d, failure %d)",
			cfg.SuccessThreshold, cfg.FailureThreshold)
	}
	t := &Tracker{successThreshold: cfg.SuccessThreshold, failureThreshold: cfg.FailureThreshold, healthy: cfg.InitialHealthy}
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
