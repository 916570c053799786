package publisher

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// flipQueue hands the resources whose verdicts flipped, from the probe
// goroutines, straight to the controller's queue, delayed by the
// coalescing window (repeats of one resource merge there). Adding to a
// workqueue never blocks, so a probe goroutine cannot stall the scheduler,
// even after the controller has stopped; before the controller starts its
// sources no target exists, so nothing is lost.
type flipQueue struct {
	delay time.Duration
	// wholeWindow makes addNow wait out delay too.
	wholeWindow bool
	mu          sync.Mutex
	queue       workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// source is the controller's source of flips: starting it hands over the
// queue.
func (f *flipQueue) source() source.TypedSource[reconcile.Request] {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.queue = q
		return nil
	})
}

// add asks for a reconcile of a resource after the coalescing window; it
// does nothing before the controller started.
func (f *flipQueue) add(key types.NamespacedName) {
	f.mu.Lock()
	q := f.queue
	f.mu.Unlock()
	if q != nil {
		q.AddAfter(reconcile.Request{NamespacedName: key}, f.delay)
	}
}

// addNow asks for a reconcile of a resource at once; a delayed add of it
// still pending then finds nothing left to write.
func (f *flipQueue) addNow(key types.NamespacedName) {
	if f.wholeWindow {
		f.add(key)
		return
	}
	f.mu.Lock()
	q := f.queue
	f.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}
