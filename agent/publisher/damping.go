package publisher

import (
	"time"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// Flap damping (spec.healthcheck.flapDamping), as Envoy's outlier
// ejection: a target withdrawn for the n-th time in a row stays out at
// least n × base, at most max, however soon it passes again; passing for
// stable without a withdrawal ends the run. A backend that fails 30 s and
// passes 10 s at a 10 s period, failureThreshold 3, costs two writes per
// 40 s undamped (180 an hour), and two per max and a period once damped.

// damping is a resource's flap damping; nil when off.
type damping struct {
	base, max, stable time.Duration
}

// dampingOf reads the spec's flap damping; nil when unset.
func dampingOf(hc *swhv1alpha1.Healthcheck) *damping {
	fd := hc.FlapDamping
	if fd == nil {
		return nil
	}
	d := &damping{base: time.Duration(fd.BaseEjectionSeconds) * time.Second, max: time.Duration(fd.MaxEjectionSeconds) * time.Second,
		stable: time.Duration(fd.StableSeconds) * time.Second}
	// An object stored before the CRD's defaults: Envoy's 30 s, ten
	// minutes.
	if d.base <= 0 {
		d.base = 30 * time.Second
	}
	if d.max <= 0 {
		d.max = 10 * time.Minute
	}
	if d.stable <= 0 {
		d.stable = 10 * time.Minute
	}
	d.max = max(d.max, d.base)
	return d
}

// flapState is a target's run of flaps.
type flapState struct {
	// ejections counts the withdrawals of the current run; until is when
	// the last one may end; passingSince is when the target was last
	// published passing (zero while it is out).
	ejections    int
	until        time.Time
	passingSince time.Time
	// hidden is set while the target passes and its ejection is not
	// over: it stays published as failing until then.
	hidden bool
}

// damp applies the damping to a result after which the published verdict
// flips (flipped) to the tracker's state, and returns whether it still
// does. A target passing again before its ejection ends stays out
// (hidden; o.damped) unless no other pod of the node passes its probe:
// damping must not keep a port empty. Its tracker goes on counting, so
// it is published at the end of the ejection (verdicts read it through
// published) with successThreshold counted as usual; its endpoint keeps
// the reason of its last failure meanwhile (no write: the start state is
// no news). s.mu is held.
func (s *targetTable) damp(key targetKey, t *target, flipped bool, now time.Time, o *observation) bool {
	d, f := t.damping, &t.flaps
	switch {
	case d == nil:
		return flipped
	case f.hidden && !flipped && !now.Before(f.until):
		// Its ejection is over and it still passes: published.
		f.hidden, f.passingSince = false, now
		return true
	case !flipped:
		return false
	case !t.tracker.Healthy() && f.hidden:
		// It failed again before it was published: the same withdrawal.
		f.hidden = false
		return false
	case !t.tracker.Healthy():
		if !f.passingSince.IsZero() && now.Sub(f.passingSince) >= d.stable {
			f.ejections = 0
		}
		f.ejections++
		f.until = now.Add(min(d.base*time.Duration(f.ejections), d.max))
		f.passingSince = time.Time{}
		return true
	case now.Before(f.until) && s.othersPassing(key):
		f.hidden = true
		o.damped, o.dampedUntil = true, f.until
		return false
	}
	f.passingSince = now
	return true
}

// published reports whether a target's verdict is published passing:
// healthy and not hidden by its ejection (ending the hiding once the
// ejection is over). s.mu is held.
func (t *target) published(now time.Time) bool {
	f := &t.flaps
	if f.hidden && !now.Before(f.until) {
		f.hidden, f.passingSince = false, now
		if t.tracker.Healthy() {
			t.history.add(swhv1alpha1.TargetTransition{At: now.UTC(), Event: swhv1alpha1.TransitionPublished, Reason: string(t.last.Reason)})
		}
	}
	return t.tracker.Healthy() && !f.hidden
}

// othersPassing reports whether another pod of the node passes the probe
// of key. s.mu is held.
func (s *targetTable) othersPassing(key targetKey) bool {
	for k, t := range s.targets {
		if k.Resource == key.Resource && k.Probe == key.Probe && k.Pod != key.Pod && t.tracker.Healthy() && !t.flaps.hidden {
			return true
		}
	}
	return false
}

// setDamping updates a running target's flap damping in place: a change
// of it keeps the target's run of flaps.
func (s *targetTable) setDamping(key targetKey, d *damping) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.targets[key]; ok {
		t.damping = d
		if d == nil {
			t.flaps = flapState{}
		}
	}
}
