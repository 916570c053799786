package realnode_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// withdrawals watches a Service's EndpointSlices and records every moment
// an address that was ready stops being ready in all of them (a slice
// deleted, replaced, or its endpoint marked not ready): what a rollout of
// the agent or the controller must never cause.
type withdrawals struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []string
	// first is when each address was first withdrawn.
	first map[string]time.Time
	// states are the conditions each address was published with
	// (ready/serving/terminating as three letters, R/S/T or -).
	states map[string]map[string]bool
	err    error
}

func watchWithdrawals(ctx context.Context, t testing.TB, ns, service string) *withdrawals {
	t.Helper()
	wc, err := client.NewWithWatch(cluster.CP.Config, client.Options{Scheme: cluster.CP.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: service})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	ww := &withdrawals{cancel: cancel, done: make(chan struct{}), first: map[string]time.Time{}, states: map[string]map[string]bool{}}
	go func() {
		defer close(ww.done)
		defer w.Stop()
		slices := map[string]*discoveryv1.EndpointSlice{}
		ready := map[string]bool{}
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					ww.fail(fmt.Errorf("the watch of %s's slices ended early", service))
					return
				}
				s, isSlice := ev.Object.(*discoveryv1.EndpointSlice)
				if !isSlice {
					ww.fail(fmt.Errorf("watch event %s: %T", ev.Type, ev.Object))
					return
				}
				if ev.Type == watch.Deleted {
					delete(slices, s.Name)
				} else {
					slices[s.Name] = s
				}
				ww.recordStates(s)
				now := readyIn(slices)
				for addr := range ready {
					if !now[addr] {
						ww.record(addr, fmt.Sprintf("%s %s withdrawn (%s of slice %s)", time.Now().Format("15:04:05.000"), addr, ev.Type, s.Name))
					}
				}
				ready = now
			}
		}
	}()
	return ww
}

func readyIn(slices map[string]*discoveryv1.EndpointSlice) map[string]bool {
	ready := map[string]bool{}
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				for _, a := range e.Addresses {
					ready[a] = true
				}
			}
		}
	}
	return ready
}

func (w *withdrawals) record(addr, e string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, e)
	if _, seen := w.first[addr]; !seen {
		w.first[addr] = time.Now()
	}
}

func (w *withdrawals) recordStates(s *discoveryv1.EndpointSlice) {
	flag := func(b *bool, def bool, letter string) string {
		if (b == nil && def) || (b != nil && *b) {
			return letter
		}
		return "-"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range s.Endpoints {
		state := flag(e.Conditions.Ready, true, "R") + flag(e.Conditions.Serving, true, "S") + flag(e.Conditions.Terminating, false, "T")
		for _, a := range e.Addresses {
			if w.states[a] == nil {
				w.states[a] = map[string]bool{}
			}
			w.states[a][state] = true
		}
	}
}

// published reports whether addr was ever published in state (see states).
func (w *withdrawals) published(addr, state string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.states[addr][state]
}

// firstWithdrawal returns when addr was first withdrawn (zero if never).
func (w *withdrawals) firstWithdrawal(addr string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first[addr]
}

func (w *withdrawals) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
}

// stop ends the watch and returns what it saw.
func (w *withdrawals) stop() ([]string, error) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	sort.Strings(w.events)
	return w.events, w.err
}
