package probes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxConcurrent is the default bound on probes in flight. A probe in
// flight costs a goroutine and a socket; none exist between probes. Size it
// as probes per second times the time a probe may take: 10,000 targets at a
// 1 s period whose probes take 1 ms need 10, but 10% of them timing out
// after 1 s need 1,000. The slots are shared: see
// SchedulerOptions.MaxConcurrentPerGroup for keeping one group's slow probes
// from taking them all.
const DefaultMaxConcurrent = 1024

// minSleep is the shortest sleep of the scheduling loop. A wake-up costs
// tens of microseconds of CPU on a busy virtual machine; at 10,000 probes
// per second, due 100µs apart, waking for each would cost more than the
// scheduling itself. With it, the loop wakes at most 500 times a second and
// starts what is due in one go: probes start up to 2ms late, never early.
const minSleep = 2 * time.Millisecond

// Job is what the Scheduler runs for one key.
type Job struct {
	Prober Prober
	Target Target
	// Period is the time between the starts of two probes; required. A
	// probe slower than its period is never overlapped: the next one
	// starts when it ends, and the ticks it covered are skipped.
	Period time.Duration
	// Timeout bounds each probe; 0 means DefaultTimeout, or Period if
	// shorter.
	Timeout time.Duration
	// InitialDelay is the wait before the first probe. Unless jitter is
	// disabled, the first probe comes at a random point of the period that
	// follows it, so that targets added together spread out.
	InitialDelay time.Duration
	// FastPeriod is the period while the key's pace is PaceChanging (see
	// Scheduler.SetPace), HAProxy's fastinter: the results disagree with
	// the verdict and the next ones should decide it soon. 0 means Period;
	// it must not exceed Period.
	FastPeriod time.Duration
	// DownPeriod is the period while the key's pace is PaceDown,
	// HAProxy's downinter: a target that was serving is down. 0 means
	// Period; it must not be below Period.
	DownPeriod time.Duration
	// Group is the group whose share of the concurrency slots the key's
	// probes take (SchedulerOptions.MaxConcurrentPerGroup): a tenant, say.
	// Keys of one group share its slots; "" is a group like any other.
	Group string
}

func (j Job) validate() error {
	switch {
	case j.Prober == nil:
		return errors.New("probes: job has no Prober")
	case j.Period <= 0:
		return fmt.Errorf("probes: job period %s is not positive", j.Period)
	case j.Timeout < 0 || j.InitialDelay < 0:
		return fmt.Errorf("probes: job timeout %s and initial delay %s must not be negative", j.Timeout, j.InitialDelay)
	case j.FastPeriod < 0:
		return fmt.Errorf("probes: job FastPeriod %s is negative", j.FastPeriod)
	case j.FastPeriod > j.Period:
		return fmt.Errorf("probes: job FastPeriod %s exceeds Period %s", j.FastPeriod, j.Period)
	case j.DownPeriod < 0:
		return fmt.Errorf("probes: job DownPeriod %s is negative", j.DownPeriod)
	case j.DownPeriod > 0 && j.DownPeriod < j.Period:
		return fmt.Errorf("probes: job DownPeriod %s is below Period %s", j.DownPeriod, j.Period)
	}
	return j.Target.Validate()
}

func (j Job) timeout() time.Duration {
	if j.Timeout > 0 {
		return j.Timeout
	}
	return min(DefaultTimeout, j.Period)
}

// Report is one result delivered by the Scheduler.
type Report[K comparable] struct {
	Key       K
	Target    Target
	Result    Result
	Scheduled time.Time // when the probe was due
	Started   time.Time // when it started; Started - Scheduled is the scheduling lag
}

// SchedulerOptions configures a Scheduler.
type SchedulerOptions[K comparable] struct {
	// OnResult receives every result; required. It runs on the probe's
	// goroutine, holding its concurrency slot, so it should be quick.
	// Results of one key arrive one at a time, in order: the next probe of
	// a key starts only after OnResult returned for the previous one.
	// Results of different keys arrive concurrently. It may call the
	// Scheduler's methods.
	OnResult func(Report[K])
	// MaxConcurrent bounds the probes in flight; 0 means
	// DefaultMaxConcurrent. When it is reached, due probes wait: that shows
	// as scheduling lag.
	MaxConcurrent int
	// MaxConcurrentPerGroup bounds the probes in flight of one group
	// (Job.Group), so that a group whose probes are slow or hang (targets
	// that accept and never answer, under long timeouts) cannot hold every
	// slot: past its bound its own due probes wait, as lag of its own, and
	// the slots it cannot take stay for the other groups, whose probes run
	// on time as long as fewer than MaxConcurrent/MaxConcurrentPerGroup
	// groups are at their bound. 0 means MaxConcurrent: groups are not
	// bounded. It must not exceed MaxConcurrent.
	MaxConcurrentPerGroup int
	// NoJitter starts each job exactly InitialDelay after it was added.
	NoJitter bool
}

// Scheduler runs the probes of many keys, each at its own period, from one
// goroutine and one timer: a key costs memory (about 200 bytes), not a
// goroutine, until its probe is due. A probe runs on a goroutine of its own,
// which goes on with the next due probe, if any, when it is done. Its
// methods are safe for concurrent use.
type Scheduler[K comparable] struct {
	onResult func(Report[K])
	slots    chan struct{} // a counting semaphore of probes in flight
	perGroup int           // probes in flight of one group at most
	noJitter bool
	wake     chan struct{} // the earliest due time may have moved
	epoch    time.Time     // due times are nanoseconds since epoch, on the monotonic clock
	inFlight sync.WaitGroup
	stopping atomic.Bool

	mu      sync.Mutex
	entries map[K]*entry[K]
	groups  map[string]*group[K]
	// ready holds the groups below their bound that have an idle entry,
	// by their earliest due entry: the next probe to start is the head of
	// its head.
	ready   timeHeap[*group[K]]
	started bool
}

type entry[K comparable] struct {
	key     K
	job     Job
	group   *group[K]     // of job.Group
	gen     atomic.Uint64 // bumped (under mu) by Update and Remove: older probes' results are dropped
	jitter  float64       // where in its period the first probe falls, in [0, 1)
	added   int64
	anchor  int64              // a tick of the Period and DownPeriod grids (see nextDue)
	next    int64              // when the next probe is due
	lastDue int64              // when the last probe was due, if ran
	index   int                // in group.queue; -1 while a probe runs
	cancel  context.CancelFunc // of the running probe; nil when idle
	pace    Pace               // set by SetPace
	ran     bool
	removed bool
}

// NewScheduler returns a Scheduler; it probes nothing until Run.
func NewScheduler[K comparable](opts SchedulerOptions[K]) (*Scheduler[K], error) {
	if opts.OnResult == nil {
		return nil, errors.New("probes: scheduler needs OnResult")
	}
	if opts.MaxConcurrent < 0 {
		return nil, fmt.Errorf("probes: scheduler MaxConcurrent %d is negative", opts.MaxConcurrent)
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	switch {
	case opts.MaxConcurrentPerGroup < 0:
		return nil, fmt.Errorf("probes: scheduler MaxConcurrentPerGroup %d is negative", opts.MaxConcurrentPerGroup)
	case opts.MaxConcurrentPerGroup > opts.MaxConcurrent:
		return nil, fmt.Errorf("probes: scheduler MaxConcurrentPerGroup %d exceeds MaxConcurrent %d", opts.MaxConcurrentPerGroup, opts.MaxConcurrent)
	case opts.MaxConcurrentPerGroup == 0:
		opts.MaxConcurrentPerGroup = opts.MaxConcurrent
	}
	return &Scheduler[K]{
		onResult: opts.OnResult,
		slots:    make(chan struct{}, opts.MaxConcurrent),
		perGroup: opts.MaxConcurrentPerGroup,
		noJitter: opts.NoJitter,
		wake:     make(chan struct{}, 1),
		epoch:    time.Now(),
		entries:  make(map[K]*entry[K]),
		groups:   make(map[string]*group[K]),
	}, nil
}

func (s *Scheduler[K]) now() int64 { return int64(time.Since(s.epoch)) }

func (s *Scheduler[K]) time(at int64) time.Time { return s.epoch.Add(time.Duration(at)) }

// Add schedules a new key. It fails if the key exists or the job is invalid.
func (s *Scheduler[K]) Add(key K, job Job) error {
	if err := job.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[key]; ok {
		return fmt.Errorf("probes: scheduler key %v exists", key)
	}
	e := &entry[K]{key: key, job: job, added: s.now(), index: -1}
	if !s.noJitter {
		e.jitter = rand.Float64()
	}
	e.next = e.firstDue()
	e.anchor = e.next
	s.entries[key] = e
	s.join(e)
	s.enqueue(e)
	return nil
}

// Update replaces the job of a key, keeping its place in time and its pace:
// the next probe is due one new period (of its pace) after the last one was
// due (or as first planned, with the new InitialDelay, if none has run); the
// grids of the new Period and DownPeriod start at that last (or first) due
// time, or now if the key is overdue. A probe of the old job still running
// is canceled and its result dropped. It fails if the key is unknown or the
// job invalid.
func (s *Scheduler[K]) Update(key K, job Job) error {
	if err := job.validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return fmt.Errorf("probes: scheduler key %v is unknown", key)
	}
	idle := e.cancel == nil
	if idle {
		s.dequeue(e)
	}
	if job.Group != e.job.Group {
		s.leave(e)
		e.job = job
		s.join(e)
	}
	e.job = job
	e.gen.Add(1)
	if e.ran {
		e.anchor = e.lastDue
	} else {
		e.anchor = e.firstDue()
	}
	if !idle {
		e.cancel() // requeued with the new job when the probe returns
		return nil
	}
	e.next = e.anchor
	if e.ran {
		anchor, period := e.grid()
		e.next = nextTick(anchor, period, e.lastDue)
	}
	if now := s.now(); e.next < now {
		// Overdue (the key waited for a slot, or the new InitialDelay has
		// passed): due now, and the grids start there, so that keys never
		// paced are due as they were before pacing.
		e.next, e.anchor = now, now
	}
	s.enqueue(e)
	return nil
}

// Remove unschedules a key and reports whether it existed. A probe of it
// still running is canceled and its result dropped; an OnResult call already
// under way may still complete after Remove returns.
func (s *Scheduler[K]) Remove(key K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return false
	}
	delete(s.entries, key)
	e.removed = true
	e.gen.Add(1)
	if e.cancel != nil {
		e.cancel()
	} else {
		s.dequeue(e)
	}
	s.leave(e)
	return true
}

// Len returns the number of scheduled keys.
func (s *Scheduler[K]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

func (e *entry[K]) firstDue() int64 {
	return e.added + int64(e.job.InitialDelay) + int64(e.jitter*float64(e.job.Period))
}

// wakeRun tells Run that the earliest due time may have moved.
func (s *Scheduler[K]) wakeRun() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// Run probes until ctx ends, then cancels the probes in flight, waits for
// them and returns nil; results of probes cut short by the shutdown are not
// delivered. Keys can be added, updated and removed before and during Run.
// Run may be called only once.
func (s *Scheduler[K]) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("probes: Scheduler.Run called twice")
	}
	s.started = true
	s.mu.Unlock()
	defer s.shutdown()

	// Probe contexts keep ctx's values but not its cancellation: tying
	// thousands of short-lived contexts to one parent costs a lock and a
	// map entry each. The scheduler cancels them itself (Update, Remove,
	// shutdown).
	parent := context.WithoutCancel(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case s.slots <- struct{}{}: // wait for a free slot before taking a probe off the queue
		case <-ctx.Done():
			return nil
		}
		p, wait := s.dispatch(parent)
		if p != nil {
			s.inFlight.Add(1)
			go s.probe(p, parent)
			continue
		}
		<-s.slots // nothing due: give the slot back
		var fire <-chan time.Time
		if wait > 0 {
			timer.Reset(max(wait, minSleep))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-fire:
		}
	}
}

// dispatched is a probe taken off the queue.
type dispatched[K comparable] struct {
	e      *entry[K]
	group  *group[K] // whose slot the probe holds
	gen    uint64
	job    Job
	due    int64
	ctx    context.Context
	cancel context.CancelFunc
}

// dispatch takes the earliest entry off the queue if it is due. Otherwise it
// returns how long to wait for it, or 0 if the queue is empty.
func (s *Scheduler[K]) dispatch(parent context.Context) (*dispatched[K], time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeDue(parent)
}

// takeDue is dispatch with s.mu held.
func (s *Scheduler[K]) takeDue(parent context.Context) (*dispatched[K], time.Duration) {
	if len(s.ready) == 0 || s.stopping.Load() {
		return nil, 0
	}
	if wait := s.ready[0].at - s.now(); wait > 0 {
		return nil, time.Duration(wait)
	}
	g := s.ready[0].p
	e := g.queue.pop()
	g.inFlight++
	s.refresh(g)
	e.lastDue, e.ran = e.next, true
	ctx, cancel := context.WithTimeout(parent, e.job.timeout())
	e.cancel = cancel
	return &dispatched[K]{e: e, group: g, gen: e.gen.Load(), job: e.job, due: e.next, ctx: ctx, cancel: cancel}, 0
}

// probe runs one probe, delivers its result and puts the entry back in the
// queue. Then, if another probe is due, it runs that one too, in the same
// goroutine and concurrency slot: under load, this saves starting a
// goroutine (and waking a thread) per probe.
func (s *Scheduler[K]) probe(p *dispatched[K], parent context.Context) {
	defer s.inFlight.Done()
	defer func() { <-s.slots }()
	for p != nil {
		started := time.Now()
		res := p.job.Prober.Probe(p.ctx, p.job.Target)
		res.Message = CutMessage(res.Message) // any Prober's, not only this package's
		p.cancel()
		if !s.stopping.Load() && p.e.gen.Load() == p.gen {
			s.onResult(Report[K]{Key: p.e.key, Target: p.job.Target, Result: res, Scheduled: s.time(p.due), Started: started})
		}
		p = s.requeue(p, parent)
	}
}

// requeue gives back the group slot of the probe p ran, schedules the next
// probe of its entry at its pace (see nextDue), and takes the next due probe
// off the queue, if any.
func (s *Scheduler[K]) requeue(p *dispatched[K], parent context.Context) *dispatched[K] {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := p.e
	e.cancel = nil
	p.group.inFlight--
	if s.refresh(p.group) {
		s.wakeRun() // its due probes waited for this slot
	}
	s.forgetIfUnused(p.group)
	if !e.removed && !s.stopping.Load() {
		e.next = e.nextDue(s.now())
		s.enqueue(e)
	}
	next, _ := s.takeDue(parent)
	return next
}

// shutdown cancels the probes in flight and waits for them.
func (s *Scheduler[K]) shutdown() {
	s.mu.Lock()
	s.stopping.Store(true)
	for _, e := range s.entries {
		if e.cancel != nil {
			e.cancel()
		}
	}
	s.mu.Unlock()
	s.inFlight.Wait()
}
