package publisher

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// targetKey names one probe of one pod for one resource: the unit the
// scheduler runs and a tracker counts.
type targetKey struct {
	Resource types.NamespacedName
	Pod      types.UID
	Probe    int
}

// target is the state of one targetKey.
type target struct {
	tracker *probes.Tracker
	// addr and spec identify the job: a change of either starts afresh.
	addr probes.Target
	spec string
	// last is the latest result, for events and status messages.
	last probes.Result
	// owner identifies the resource in events.
	owner types.UID
	// pod names the pod in events.
	pod string
	// mode labels the probe's metrics.
	mode string
	// lastAt is when the last result came, failingSince when the current
	// run of failures began (zero while passing).
	lastAt, failingSince time.Time
	// passedOnce is set once the target has been healthy (or started so).
	passedOnce bool
	// window is how long after another target's first failure this one's
	// counts as beginning with it (failstatic.go): its failure threshold's
	// worth of periods and a timeout.
	window time.Duration
	// heldBy is the hold that keeps the target published as passing while
	// its tracker says otherwise (failstatic.go); nil when none does.
	// kept is set when that keeps a port published (its pod Ready, the
	// port not exclusive).
	heldBy *hold
	kept   bool
	// damping is the resource's flap damping (nil: off), flaps the
	// target's run of withdrawals (damping.go).
	damping *damping
	flaps   flapState
	// history holds the last transitions, for kubectl swh (history.go).
	history transitions
}

// targetTable holds every target of the node. Probe goroutines report into it
// while reconciles read it, hence the lock.
type targetTable struct {
	// failClosed turns fail static off (Options.FailClosed).
	failClosed bool
	// clock is time.Now but in tests of the flap damping's times.
	clock   func() time.Time
	mu      sync.Mutex
	targets map[targetKey]*target
	// changed records, per resource, when a verdict changed first since
	// the last write: the start of the verdict-to-write delay.
	changed map[types.NamespacedName]time.Time
	// lastSuccess is, per hold scope, when a target of it last passed;
	// holds are the standing holds (failstatic.go).
	lastSuccess map[holdScope]time.Time
	holds       map[holdScope]*hold
	// perResource counts the targets of each resource; rounds holds each
	// resource's latest round of results (rounds.go).
	perResource map[types.NamespacedName]int
	rounds      map[types.NamespacedName]*round
}

func newTargetTable(failClosed bool) *targetTable {
	return &targetTable{failClosed: failClosed, clock: time.Now, targets: map[targetKey]*target{}, changed: map[types.NamespacedName]time.Time{},
		lastSuccess: map[holdScope]time.Time{}, holds: map[holdScope]*hold{},
		perResource: map[types.NamespacedName]int{}, rounds: map[types.NamespacedName]*round{}}
}

// observation is what observe learned from one result.
type observation struct {
	flipped bool
	// newReason is set when the result's reason differs from the last
	// one, newMessage when its message does.
	newReason, newMessage bool
	owner                 types.UID
	pod                   string
	mode                  string
	// pace is the target's pace after the result; repace lists targets
	// whose hold ended, to be probed at PaceChanging (failstatic.go).
	pace   probes.Pace
	repace []targetKey
	// held is set when a hold began keeping the target, unheld when one
	// stopped (failstatic.go).
	held, unheld bool
	// roundDone is set when the result completes a round of the
	// resource's results in which something changed (rounds.go).
	roundDone bool
	// damped is set when flap damping kept the target out although it
	// passed, until dampedUntil (damping.go).
	damped      bool
	dampedUntil time.Time
}

// observe records a result; known is false for a target removed while its
// probe ran.
func (s *targetTable) observe(key targetKey, res probes.Result, due, started, now time.Time) (o observation, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.targets[key]
	if !ok {
		return observation{}, false
	}
	o = observation{newReason: t.last.Reason != res.Reason, newMessage: t.last.Message != res.Message, owner: t.owner, pod: t.pod, mode: t.mode}
	// The underlying error is not kept: it may hold much more than the
	// message (a server's whole error), once per target of the node.
	res.Err = nil
	t.last = res
	wasHealthy := t.tracker.Healthy()
	s.noteResult(key, t, res, now, &o)
	_, flipped := t.tracker.Observe(res.Status)
	o.flipped = s.failStatic(key, t, res, started, wasHealthy, flipped, &o)
	o.flipped = s.damp(key, t, o.flipped, now, &o)
	t.history.note(t, o, now)
	t.passedOnce = t.passedOnce || t.tracker.Healthy()
	o.roundDone = s.countRound(key.Resource, due, o.flipped || o.held || o.unheld)
	switch h := t.heldBy; {
	case h == nil:
		o.pace = t.tracker.Pace()
	case h.ended.IsZero():
		// Published as passing: probed as such, not at the down pace.
		o.pace = probes.PaceSteady
	default:
		o.pace = probes.PaceChanging // to be decided soon
	}
	if o.flipped {
		if _, pending := s.changed[key.Resource]; !pending {
			s.changed[key.Resource] = now
		}
	}
	return o, true
}

// probeStates is what a pod's targets say for one resource.
type probeStates struct {
	// passing are the probes whose verdict is healthy; held are those a
	// hold would keep published as passing (failstatic.go), and kept
	// those of them that the last verdicts kept (their pod Ready, their
	// port not exclusive).
	passing, held, kept endpoints.ProbeSet
	// last is the latest result of each probe (a zero Result when none
	// came yet), for messages; holds is the hold of each held probe.
	last  []probes.Result
	holds []*hold
}

// passing returns the state of the probes of a pod.
func (s *targetTable) passing(resource types.NamespacedName, pod types.UID, numProbes int) probeStates {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := probeStates{last: make([]probes.Result, numProbes)}
	now := s.clock()
	for i := range numProbes {
		t, ok := s.targets[targetKey{resource, pod, i}]
		if !ok {
			continue
		}
		st.last[i] = t.last
		switch {
		case t.published(now):
			st.passing = st.passing.With(i)
		case t.heldBy != nil:
			st.held = st.held.With(i)
			if t.kept {
				st.kept = st.kept.With(i)
			}
			if st.holds == nil {
				st.holds = make([]*hold, numProbes)
			}
			st.holds[i] = t.heldBy
		}
	}
	return st
}

// takeChanged returns and clears when the resource's verdicts first changed.
func (s *targetTable) takeChanged(resource types.NamespacedName) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.changed[resource]
	delete(s.changed, resource)
	return t, ok
}

// restoreChanged puts back a change time takeChanged returned, when the
// write it was for failed, unless an earlier one is pending.
func (s *targetTable) restoreChanged(resource types.NamespacedName, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, pending := s.changed[resource]; !pending || at.Before(t) {
		s.changed[resource] = at
	}
}

// keysOf lists the targets of a resource.
func (s *targetTable) keysOf(resource types.NamespacedName) []targetKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []targetKey
	for k := range s.targets {
		if k.Resource == resource {
			out = append(out, k)
		}
	}
	return out
}

func (s *targetTable) get(key targetKey) (addr probes.Target, spec string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.targets[key]
	if !ok {
		return probes.Target{}, "", false
	}
	return t.addr, t.spec, true
}

func (s *targetTable) put(key targetKey, t *target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.targets[key]; ok {
		s.unhold(key, old)
	} else {
		s.perResource[key.Resource]++
	}
	s.targets[key] = t
}

func (s *targetTable) remove(key targetKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.targets[key]
	if !ok {
		return
	}
	s.unhold(key, t)
	delete(s.targets, key)
	if s.perResource[key.Resource]--; s.perResource[key.Resource] <= 0 {
		s.forgetResource(key.Resource)
	}
}

// forgetResource drops what the table keeps of a resource with no target
// left. s.mu is held.
func (s *targetTable) forgetResource(resource types.NamespacedName) {
	delete(s.perResource, resource)
	delete(s.rounds, resource)
	delete(s.changed, resource)
	for scope := range s.lastSuccess {
		if scope.resource == resource {
			delete(s.lastSuccess, scope)
		}
	}
	for scope, h := range s.holds {
		if scope.resource == resource && scope != nodeScope {
			delete(s.holds, h.scope)
		}
	}
}

func (s *targetTable) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.targets)
}

// healthy returns the verdict of a running target, as published: a held
// target that keeps a port published is.
func (s *targetTable) healthy(key targetKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.targets[key]
	return ok && (t.published(s.clock()) || t.heldBy != nil && t.kept)
}
