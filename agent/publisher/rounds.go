package publisher

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Coalescing by rounds. Every target of a resource is probed at the same
// due time (phase.go), so a round's results arrive within milliseconds of
// each other: once every target of the resource has reported for the due
// time of a flip, no other flip of that round can come, and the write need
// not wait out the rest of the coalescing window. The window (Options.
// Coalesce) stays the bound, for rounds that never complete: a probe that
// times out, or targets on other schedules (a fast or down pace).

// roundSpread is how far apart the due times of one round may be: each
// target's first due time is its phase instant plus the microseconds
// between computing it and adding it to the scheduler (and the wall
// clock's drift from the monotonic one since), never near a period
// (1 s at least) apart.
const roundSpread = 100 * time.Millisecond

// round counts the results of one due time of a resource's targets.
type round struct {
	due      time.Time
	reported int
	// flipped is set when a result of the round changed what is
	// published (a verdict flipped, a hold began or ended).
	flipped bool
}

// countRound records a result of resource's target due at due, whether it
// changed what is published, and reports whether that completes a round
// in which something changed. s.mu is held.
func (s *targetTable) countRound(resource types.NamespacedName, due time.Time, changed bool) bool {
	r := s.rounds[resource]
	if r == nil || due.Sub(r.due).Abs() > roundSpread {
		if r != nil && due.Before(r.due) {
			// A late result of an earlier round (a slow probe): the
			// window covers it.
			return false
		}
		r = &round{due: due}
		s.rounds[resource] = r
	}
	r.reported++
	r.flipped = r.flipped || changed
	return r.flipped && r.reported == s.perResource[resource]
}
