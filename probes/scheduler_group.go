package probes

// group is the keys of one Job.Group and the slots their probes hold.
type group[K comparable] struct {
	name     string
	queue    timeHeap[*entry[K]] // its idle entries, earliest due first
	keys     int                 // its entries, idle or not
	inFlight int                 // its probes running
	index    int                 // in Scheduler.ready; -1 when out of it
}

// The methods below run with s.mu held.

// join counts e in the group of its job, which it creates if needed.
func (s *Scheduler[K]) join(e *entry[K]) {
	g := s.groups[e.job.Group]
	if g == nil {
		g = &group[K]{name: e.job.Group, index: -1}
		s.groups[g.name] = g
	}
	g.keys++
	e.group = g
}

// leave uncounts e from its group, which goes once it has neither keys nor
// probes running. e must be out of the group's queue.
func (s *Scheduler[K]) leave(e *entry[K]) {
	e.group.keys--
	s.forgetIfUnused(e.group)
}

func (s *Scheduler[K]) forgetIfUnused(g *group[K]) {
	if g.keys == 0 && g.inFlight == 0 && s.groups[g.name] == g {
		delete(s.groups, g.name)
	}
}

// enqueue puts the idle entry e in its group's queue, at e.next.
func (s *Scheduler[K]) enqueue(e *entry[K]) {
	e.group.queue.push(e, e.next, &e.index)
	if s.refresh(e.group) {
		s.wakeRun()
	}
}

// dequeue takes the idle entry e out of its group's queue. An entry whose
// probe returned while Run was stopping was never queued again (index -1).
func (s *Scheduler[K]) dequeue(e *entry[K]) {
	if e.index < 0 {
		return
	}
	e.group.queue.remove(e.index)
	s.refresh(e.group)
}

// refresh puts g in s.ready at its earliest due entry when it has one and
// room for a probe, and takes it out otherwise. It reports whether g came
// first in s.ready, or moved while first: the earliest due time of all may
// be earlier than Run is waiting for.
func (s *Scheduler[K]) refresh(g *group[K]) bool {
	if len(g.queue) == 0 || g.inFlight >= s.perGroup {
		if g.index >= 0 {
			s.ready.remove(g.index) // Run wakes for nothing at worst
		}
		return false
	}
	at := g.queue[0].at
	switch {
	case g.index < 0:
		s.ready.push(g, at, &g.index)
	case s.ready[g.index].at == at:
		return false
	default:
		s.ready.fix(g.index, at)
	}
	return g.index == 0
}
