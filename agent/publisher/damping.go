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
}

// damp applies the damping to a result after which the published verdict
// flips (flipped) to the tracker's state, and returns whether it still
// does: a target passing again before its ejection ends stays out, its
// successes forgotten (o.damped), and its reason stays the failure's (no
// write: the start state is no news). The table's lock is held.
func (t *target) damp(flipped bool, now time.Time, o *observation) bool {
	d, f := t.damping, &t.flaps
	if d == nil || !flipped {
		return flipped
	}
	if !t.tracker.Healthy() {
		if !f.passingSince.IsZero() && now.Sub(f.passingSince) >= d.stable {
			f.ejections = 0
		}
		f.ejections++
		f.until = now.Add(min(d.base*time.Duration(f.ejections), d.max))
		f.passingSince = time.Time{}
		return true
	}
	if now.Before(f.until) {
		t.tracker.Reset(false)
		o.damped = true
		return false
	}
	f.passingSince = now
	return true
}
