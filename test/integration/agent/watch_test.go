package agent_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// sliceWatch polls the slices of a resource every 20 ms and records every
// observation its judge finds wrong. A wrong state lasts whole probe
// periods (thresholds above 1, or a reason until the next result), so
// polling cannot miss it.
type sliceWatch struct {
	stop, done chan struct{}
	mu         sync.Mutex
	seen       map[string]int
}

// watchObservations starts watching; judge says what is wrong with one
// observation (the states published describes, and the slices), "" when
// nothing is.
func watchObservations(ns, name string, judge func(states map[string]string, slices []discoveryv1.EndpointSlice) string) *sliceWatch {
	w := &sliceWatch{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]int{}}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			got, slices, err := published(context.Background(), ns, name)
			if wrong := ""; err == nil {
				if wrong = judge(got, slices); wrong != "" {
					w.mu.Lock()
					w.seen[wrong]++
					w.mu.Unlock()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// watchSlices starts watching; ok judges one observation of the slices.
func watchSlices(ns, name string, ok func(map[string]string) bool) *sliceWatch {
	return watchObservations(ns, name, func(got map[string]string, _ []discoveryv1.EndpointSlice) string {
		if ok(got) {
			return ""
		}
		return fmt.Sprint(got)
	})
}

// watchSteady watches for any state other than want.
func watchSteady(ns, name string, want map[string]string) *sliceWatch {
	return watchSlices(ns, name, func(got map[string]string) bool { return fmt.Sprint(got) == fmt.Sprint(want) })
}

// check stops the watch and fails the test with every wrong observation.
func (w *sliceWatch) check(t *testing.T, during string) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		return
	}
	states := make([]string, 0, len(w.seen))
	for s, n := range w.seen {
		states = append(states, fmt.Sprintf("%s (%d observations)", s, n))
	}
	sort.Strings(states)
	t.Errorf("%s, the slices were wrong:\n  %s", during, strings.Join(states, "\n  "))
}
