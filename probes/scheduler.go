package probes

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// DefaultMaxConcurrent is the default bound on probes in flight. A probe in
// flight costs a goroutine and a socket; none exist between probes. Size it
// as probes per second times the time a probe may take: 10,000 targets at a
// 1 s period whose probes take 1 ms need 10, but 10% of them timing out
// after 1 s need 1,000.
const DefaultMaxConcurrent = 1024

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
}

func (j Job) validate() error {
	switch {
	case j.Prober == nil:
		return errors.New("probes: job has no Prober")
	case j.Period <= 0:
		return fmt.Errorf("probes: job period %s is not positive", j.Period)
	case j.Timeout < 0 || j.InitialDelay < 0:
		return fmt.Errorf("probes: job timeout %s and initial delay %s must not be negative", j.Timeout, j.InitialDelay)
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
	// NoJitter starts each job exactly InitialDelay after it was added.
	NoJitter bool
}

// Scheduler runs the probes of many keys, each at its own period, from one
// goroutine and one timer: a key costs memory (about 200 bytes), not a
// goroutine, until its probe is due. Its methods are safe for concurrent use.
type Scheduler[K comparable] struct {
	onResult func(Report[K])
	slots    chan struct{} // a counting semaphore of probes in flight
	noJitter bool
	wake     chan struct{} // the earliest due time may have moved
	inFlight sync.WaitGroup

	mu      sync.Mutex
	entries map[K]*entry[K]
	queue   queue[K] // idle entries, earliest due first
	started bool
}

type entry[K comparable] struct {
	key     K
	job     Job
	gen     uint64  // bumped by Update and Remove: results of older probes are dropped
	jitter  float64 // where in its period the first probe falls, in [0, 1)
	added   time.Time
	next    time.Time // when the next probe is due
	lastDue time.Time // when the last probe was due; zero before the first
	index   int       // in queue; -1 while a probe runs
	busy    bool
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
	return &Scheduler[K]{
		onResult: opts.OnResult,
		slots:    make(chan struct{}, opts.MaxConcurrent),
		noJitter: opts.NoJitter,
		wake:     make(chan struct{}, 1),
		entries:  make(map[K]*entry[K]),
	}, nil
}

// Add schedules a new key. It fails if the key exists or the job is invalid.
func (s *Scheduler[K]) Add(key K, job Job) error {
	if err := job.validate(); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[key]; ok {
		return fmt.Errorf("probes: scheduler key %v exists", key)
	}
	e := &entry[K]{key: key, job: job, added: now}
	if !s.noJitter {
		e.jitter = rand.Float64()
	}
	e.next = e.firstDue()
	s.entries[key] = e
	heap.Push(&s.queue, e)
	s.wakeIfFirst(e)
	return nil
}

// Update replaces the job of a key, keeping its place in time: the next
// probe is due one new period after the last one was due (or as first
// planned, with the new InitialDelay, if none has run). A probe of the old job still running is not
// interrupted, but its result is dropped. It fails if the key is unknown or
// the job invalid.
func (s *Scheduler[K]) Update(key K, job Job) error {
	if err := job.validate(); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return fmt.Errorf("probes: scheduler key %v is unknown", key)
	}
	e.job = job
	e.gen++
	if e.busy {
		return nil // rescheduled with the new job when the probe ends
	}
	if e.lastDue.IsZero() {
		e.next = e.firstDue()
	} else {
		e.next = e.lastDue.Add(job.Period)
	}
	if e.next.Before(now) {
		e.next = now
	}
	heap.Fix(&s.queue, e.index)
	s.wakeIfFirst(e)
	return nil
}

// Remove unschedules a key and reports whether it existed. A probe of it
// still running is not interrupted, but its result is dropped; an OnResult
// call already under way may still complete after Remove returns.
func (s *Scheduler[K]) Remove(key K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return false
	}
	delete(s.entries, key)
	e.removed = true
	e.gen++
	if !e.busy {
		heap.Remove(&s.queue, e.index)
	}
	return true
}

// Len returns the number of scheduled keys.
func (s *Scheduler[K]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

func (e *entry[K]) firstDue() time.Time {
	return e.added.Add(e.job.InitialDelay + time.Duration(e.jitter*float64(e.job.Period)))
}

func (s *Scheduler[K]) wakeIfFirst(e *entry[K]) {
	if e.index == 0 {
		select {
		case s.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
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

	defer s.inFlight.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e, gen, job, due, wait := s.nextDue()
		if e == nil {
			var fire <-chan time.Time
			if wait > 0 {
				timer.Reset(wait)
				fire = timer.C
			}
			select {
			case <-ctx.Done():
				return nil
			case <-s.wake:
			case <-fire:
			}
			continue
		}
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		s.inFlight.Add(1)
		go s.probe(ctx, e, gen, job, due)
	}
}

// nextDue takes the earliest entry off the queue if it is due. Otherwise it
// returns how long to wait for it, or 0 if the queue is empty.
func (s *Scheduler[K]) nextDue() (e *entry[K], gen uint64, job Job, due time.Time, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil, 0, Job{}, time.Time{}, 0
	}
	first := s.queue[0]
	if wait := time.Until(first.next); wait > 0 {
		return nil, 0, Job{}, time.Time{}, wait
	}
	heap.Pop(&s.queue)
	first.busy = true
	first.lastDue = first.next
	return first, first.gen, first.job, first.next, 0
}

// probe runs one probe of e, delivers its result and puts e back in the
// queue.
func (s *Scheduler[K]) probe(ctx context.Context, e *entry[K], gen uint64, job Job, due time.Time) {
	defer s.inFlight.Done()
	defer func() { <-s.slots }()
	if s.current(e, gen) {
		started := time.Now()
		pctx, cancel := context.WithTimeout(ctx, job.timeout())
		res := job.Prober.Probe(pctx, job.Target)
		cancel()
		if ctx.Err() == nil && s.current(e, gen) {
			s.onResult(Report[K]{Key: e.key, Target: job.Target, Result: res, Scheduled: due, Started: started})
		}
	}
	if ctx.Err() == nil {
		s.requeue(e)
	}
}

func (s *Scheduler[K]) current(e *entry[K], gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.gen == gen
}

// requeue schedules the next probe of e on its period's grid.
func (s *Scheduler[K]) requeue(e *entry[K]) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e.busy = false
	if e.removed {
		return
	}
	period := e.job.Period
	e.next = e.lastDue.Add(period)
	if e.next.Before(now) {
		// The probe outlasted its period. The next is due at once, as
		// of the last tick it covered; the ticks before are skipped.
		// Waiting for the next tick instead would halve the probing of
		// a target whose probes time out after a full period, and
		// delay its failure threshold as much.
		e.next = e.lastDue.Add(now.Sub(e.lastDue) / period * period)
	}
	heap.Push(&s.queue, e)
	s.wakeIfFirst(e)
}

// queue is a min-heap of entries by due time.
type queue[K comparable] []*entry[K]

func (q queue[K]) Len() int           { return len(q) }
func (q queue[K]) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q queue[K]) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}

func (q *queue[K]) Push(x any) {
	e := x.(*entry[K])
	e.index = len(*q)
	*q = append(*q, e)
}

func (q *queue[K]) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*q = old[:len(old)-1]
	return e
}
