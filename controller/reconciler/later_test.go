package reconciler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestLaterQueue: a pass asked for comes after its delay, however many are
// asked for at once (none is dropped), and nothing happens before the
// controller hands over its queue.
func TestLaterQueue(t *testing.T) {
	var l *laterQueue
	l.after(types.NamespacedName{Name: "nil"}, 0) // no queue: nothing, no panic

	l = &laterQueue{}
	l.after(types.NamespacedName{Name: "before-start"}, 0)
	time.Sleep(50 * time.Millisecond)

	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := l.source().Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	const many = 3000 // more than the channel source held
	start := time.Now()
	for i := range many {
		l.after(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("r%d", i)}, 100*time.Millisecond)
	}
	// A pass that never comes fails the test within 10 s, not at its
	// timeout: the queue shuts down and Get returns.
	stop := time.AfterFunc(10*time.Second, q.ShutDown)
	defer stop.Stop()
	got := map[reconcile.Request]bool{}
	for len(got) < many {
		item, shutdown := q.Get()
		if shutdown {
			t.Fatalf("%d of %d passes came within 10 s", len(got), many)
		}
		if item.Name == "before-start" {
			t.Fatal("a pass asked for before the queue was handed over was queued")
		}
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Fatalf("a pass came after %s, before its 100 ms", waited)
		}
		got[item] = true
		q.Done(item)
	}
	if q.Len() != 0 {
		t.Errorf("%d more passes queued", q.Len())
	}
}
