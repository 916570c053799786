package reconciler

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// How often the same field of a child Service is put back while someone
// keeps setting it again: each revert is a write every kube-proxy
// receives, and each of the other side's writes wakes the controller.
const (
	// revertInterval is the least time between two reverts of a field.
	revertInterval = time.Second
	// maxRevertInterval caps the interval, which doubles with each revert.
	maxRevertInterval = 5 * time.Minute
	// revertQuiet is how long without a revert resets the interval: a
	// change made once in a while is put back at once each time.
	revertQuiet = 2 * maxRevertInterval
)

// revertLimiter remembers, per resource and field, when the controller last
// put the field back, the interval before it may again, and whether a
// mutating admission put it back on the controller's own patch (held: not
// removed again until the Service or the resource changes). It lives in
// memory: a new leader starts afresh, which costs one revert per field.
type revertLimiter struct {
	mu     sync.Mutex
	fields map[types.NamespacedName]map[string]*fieldReverts
}

type fieldReverts struct {
	last     time.Time
	interval time.Duration
	// heldAt is the Service's resourceVersion and the resource's
	// generation when a patch came back with the field; "" when not held.
	heldAt    string
	heldAtGen int64
}

// gate is what the limiter allows of a pass.
type gate struct {
	// allowed fields may be put back now.
	allowed map[string]bool
	// held fields came back on the controller's own patch.
	held map[string]bool
	// deferred fields were put back too recently; wait is the soonest
	// one may be again, interval the longest interval among them.
	deferred       map[string]bool
	wait, interval time.Duration
}

func newRevertLimiter() *revertLimiter {
	return &revertLimiter{fields: map[types.NamespacedName]map[string]*fieldReverts{}}
}

// gate sorts the drifted fields of a resource whose Service is at
// resourceVersion rv and whose spec is at generation gen. A nil limiter
// allows everything.
func (l *revertLimiter) gate(key types.NamespacedName, fields []string, rv string, gen int64, now time.Time) gate {
	g := gate{allowed: map[string]bool{}, held: map[string]bool{}, deferred: map[string]bool{}}
	if l == nil {
		for _, f := range fields {
			g.allowed[f] = true
		}
		return g
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range fields {
		fr := l.fields[key][f]
		switch {
		case fr == nil:
			g.allowed[f] = true
		case fr.heldAt != "" && fr.heldAt == rv && fr.heldAtGen == gen:
			g.held[f] = true
		case now.Before(fr.last.Add(fr.interval)):
			g.deferred[f] = true
			if w := fr.last.Add(fr.interval).Sub(now); g.wait == 0 || w < g.wait {
				g.wait = w
			}
			g.interval = max(g.interval, fr.interval)
		default:
			g.allowed[f] = true
		}
	}
	return g
}

// reverted records that the fields were put back at now: the interval
// before the next revert doubles, unless the last one is long past.
func (l *revertLimiter) reverted(key types.NamespacedName, fields []string, now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	byField := l.fields[key]
	if byField == nil {
		byField = map[string]*fieldReverts{}
		l.fields[key] = byField
	}
	for _, f := range fields {
		fr := byField[f]
		switch {
		case fr == nil:
			fr = &fieldReverts{interval: revertInterval}
			byField[f] = fr
		case now.Sub(fr.last) > revertQuiet:
			fr.interval = revertInterval
		default:
			fr.interval = min(2*fr.interval, maxRevertInterval)
		}
		fr.last, fr.heldAt = now, ""
	}
}

// hold records that the fields came back on the patch that made the
// Service's resourceVersion rv, at the resource's generation gen.
func (l *revertLimiter) hold(key types.NamespacedName, fields []string, rv string, gen int64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range fields {
		if fr := l.fields[key][f]; fr != nil {
			fr.heldAt, fr.heldAtGen = rv, gen
		}
	}
}

// forget drops what the limiter knows of a resource that is gone.
func (l *revertLimiter) forget(key types.NamespacedName) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fields, key)
}
