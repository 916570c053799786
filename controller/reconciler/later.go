package reconciler

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// laterQueue queues a resource again at a time the reconciler chose, as the
// agent's flip queue does: it holds the controller's own queue, handed over
// when the controller starts its sources, and adds to it, which never
// blocks and never drops. A RequeueAfter would not do: the queue merges it
// into any earlier pass, which may still see the status from before the one
// that asked; the pass added here comes after d, whatever runs in between.
type laterQueue struct {
	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// source is the controller's source of the passes asked for: starting it
// hands over the queue.
func (l *laterQueue) source() source.TypedSource[reconcile.Request] {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.queue = q
		return nil
	})
}

// after queues key once d has passed. Before the controller starts, or on a
// nil queue, it does nothing: the first pass of every resource comes anyway.
func (l *laterQueue) after(key types.NamespacedName, d time.Duration) {
	if l == nil {
		return
	}
	time.AfterFunc(d, func() {
		l.mu.Lock()
		q := l.queue
		l.mu.Unlock()
		if q != nil {
			q.Add(reconcile.Request{NamespacedName: key})
		}
	})
}
