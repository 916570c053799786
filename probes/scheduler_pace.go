package probes

// Adaptive timing, as HAProxy's inter, fastinter and downinter: a key's
// pace (SetPace) picks the period of its next probes. The due times stay on
// grids, so that the probes of keys added together (NoJitter, one
// InitialDelay) still fire together whatever their paces went through: a
// mass failure of their targets stays one batch of probes, not a spread.
//
//   - PaceSteady: every Period, on the grid anchor + k×Period. Back from
//     the fast pace, a key returns to that grid.
//   - PaceChanging: every FastPeriod after the last probe was due. Keys
//     that switched at one tick stay together; the grid would add nothing.
//   - PaceDown: every DownPeriod, on the grid anchor + k×DownPeriod, so
//     that targets that went down together are probed together.
//
// The anchor is the first due time, and moves only with Update: to the
// last due time (or now, if the key is overdue), where the new job's grids
// start.

// SetPace sets the pace of a key's probes (PaceSteady, PaceChanging or
// PaceDown; other values count as PaceSteady) and reports whether the key
// exists. Call it from OnResult, with the pace its Tracker gives after the
// result (Tracker.Pace): the key's next probe is then due at the new pace.
// Called for an idle key, it moves the key's next probe at once, which may
// be due at once if the new period has passed since the last one. Before
// the first probe, the pace takes effect after it. Setting the pace a key
// has already changes nothing and costs a lock and a map look-up.
func (s *Scheduler[K]) SetPace(key K, pace Pace) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return false
	}
	if e.pace == pace {
		return true
	}
	e.pace = pace
	if e.cancel != nil || !e.ran {
		// In flight: requeue applies the pace when the probe returns.
		// Not run yet: the first probe is due as planned.
		return true
	}
	s.dequeue(e)
	e.next = e.nextDue(s.now())
	s.enqueue(e) // which wakes Run if the probe is now the earliest due
	return true
}

// grid returns the anchor and period of e's pace: its next probes are due
// at anchor + k×period.
func (e *entry[K]) grid() (anchor, period int64) {
	switch e.pace {
	case PaceChanging:
		if e.job.FastPeriod > 0 {
			return e.lastDue, int64(e.job.FastPeriod)
		}
	case PaceDown:
		if e.job.DownPeriod > 0 {
			return e.anchor, int64(e.job.DownPeriod)
		}
	}
	return e.anchor, int64(e.job.Period)
}

// nextDue returns when the probe after the one due at e.lastDue is due, at
// e's pace, when that probe returned (or the pace changed) at now.
func (e *entry[K]) nextDue(now int64) int64 {
	anchor, period := e.grid()
	next := nextTick(anchor, period, e.lastDue)
	if next < now {
		// The probe outlasted its period. The next is due at once, as
		// of the last tick it covered; the ticks before are skipped.
		// Waiting for the next tick instead would halve the probing of
		// a target whose probes time out after a full period, and
		// delay its failure threshold as much.
		next = anchor + floorDiv(now-anchor, period)*period
	}
	return next
}

// nextTick returns the first tick anchor + k×period strictly after t.
func nextTick(anchor, period, t int64) int64 {
	return anchor + (floorDiv(t-anchor, period)+1)*period
}

// floorDiv is a/b rounded down, for b > 0: Go's / rounds towards zero, which
// would put a tick before the anchor on the wrong side.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
