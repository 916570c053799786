package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// floorEndpoint is a pod as one port's slices publish it.
type floorEndpoint struct {
	ready  bool
	reason string
}

// floorTransition is a pod's readiness changing, as the watch saw it.
type floorTransition struct {
	pod   string
	ready bool
	at    time.Time
}

// floorWatch follows a resource's slices of one port as a kube-proxy
// does (one watch, events in the API server's order) and keeps, after
// every event, each pod's readiness and reason, and every change of a
// pod's readiness.
type floorWatch struct {
	w    watch.Interface
	port string

	mu          sync.Mutex
	slices      map[string]*discoveryv1.EndpointSlice
	pods        map[string]floorEndpoint
	at          time.Time
	transitions []floorTransition
	// states are the pods after each event, as describeFloor says, and
	// when.
	states  []string
	stateAt []time.Time
	changed chan struct{}
	ended   bool
}

func watchFloor(t *testing.T, ns, name, port string) *floorWatch {
	t.Helper()
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &discoveryv1.EndpointSliceList{}, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})
	if err != nil {
		t.Fatal(err)
	}
	f := &floorWatch{w: w, port: port, slices: map[string]*discoveryv1.EndpointSlice{}, pods: map[string]floorEndpoint{}, changed: make(chan struct{})}
	go f.run()
	t.Cleanup(w.Stop)
	return f
}

func (f *floorWatch) run() {
	for ev := range f.w.ResultChan() {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		now := time.Now()
		f.mu.Lock()
		if ev.Type == watch.Deleted {
			delete(f.slices, s.Name)
		} else {
			f.slices[s.Name] = s
		}
		var list []discoveryv1.EndpointSlice
		reasons := swhv1alpha1.EndpointReasons{}
		for _, sl := range f.slices {
			if name, _ := endpoints.SlicePort(sl); name != f.port {
				continue
			}
			list = append(list, *sl)
			if r, err := swhv1alpha1.EndpointReasonsOf(sl.Annotations); err == nil {
				for pod, entry := range r {
					reasons[pod] = entry
				}
			}
		}
		published, _ := endpoints.Read(list, endpoints.Options{})
		pods := map[string]floorEndpoint{}
		for _, e := range published {
			if e.Pod != nil {
				pods[e.Pod.Name] = floorEndpoint{ready: e.Ready, reason: reasons[e.Pod.Name].Reason}
			}
		}
		for pod, e := range pods {
			if was, seen := f.pods[pod]; !seen || was.ready != e.ready {
				f.transitions = append(f.transitions, floorTransition{pod: pod, ready: e.ready, at: now})
			}
		}
		f.pods, f.at = pods, now
		f.states, f.stateAt = append(f.states, describeFloor(pods)), append(f.stateAt, now)
		close(f.changed)
		f.changed = make(chan struct{})
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.ended = true
	close(f.changed)
	f.mu.Unlock()
}

// wait waits until the pods are published as want says ("pod:T/reason",
// "pod:F/reason", sorted) and returns when the event that made them so
// arrived.
func (f *floorWatch) wait(t *testing.T, timeout time.Duration, want ...string) time.Time {
	t.Helper()
	sort.Strings(want)
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		got := describeFloor(f.pods)
		at, changed, ended := f.at, f.changed, f.ended
		f.mu.Unlock()
		if got == strings.Join(want, " ") {
			return at
		}
		if ended {
			t.Fatal("the slice watch ended")
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("port %q:\n got %s\nwant %s", f.port, got, strings.Join(want, " "))
		}
	}
}

func describeFloor(pods map[string]floorEndpoint) string {
	var out []string
	for pod, e := range pods {
		out = append(out, fmt.Sprintf("%s:%s/%s", pod, map[bool]string{true: "T", false: "F"}[e.ready], e.reason))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// withdrawals describes each time one of pods was withdrawn after from,
// and for how long ("pod for 120ms", or "pod from 1.2s on" when it did
// not come back).
func (f *floorWatch) withdrawals(from time.Time, pods ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, pod := range pods {
		var down time.Time
		for _, tr := range f.transitions {
			switch {
			case tr.pod != pod || tr.at.Before(from):
			case !tr.ready && down.IsZero():
				down = tr.at
			case tr.ready && !down.IsZero():
				out = append(out, fmt.Sprintf("%s for %v", pod, tr.at.Sub(down).Round(time.Millisecond)))
				down = time.Time{}
			}
		}
		if !down.IsZero() {
			out = append(out, fmt.Sprintf("%s from %v on", pod, down.Sub(from).Round(time.Millisecond)))
		}
	}
	return out
}

// firstChange returns when the pods were first published otherwise than
// they were at from: the agents' first write after it.
func (f *floorWatch) firstChange(from time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	before := ""
	for i, at := range f.stateAt {
		if at.Before(from) {
			before = f.states[i]
			continue
		}
		if f.states[i] != before {
			return at
		}
	}
	return time.Time{}
}

// becameReady reports whether pod was published ready after from.
func (f *floorWatch) becameReady(from time.Time, pod string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tr := range f.transitions {
		if tr.pod == pod && tr.ready && !tr.at.Before(from) {
			return true
		}
	}
	return false
}

// logReasons logs the reasons of a resource's pods: whether an agent held
// a pod before the floor engaged shows in the message.
func logReasons(t *testing.T, ns, name string) {
	t.Helper()
	reasons, _, err := sliceReasons(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	pods := make([]string, 0, len(reasons))
	for pod := range reasons {
		pods = append(pods, pod)
	}
	sort.Strings(pods)
	for _, pod := range pods {
		t.Logf("  %s: %s: %s", pod, reasons[pod].Reason, reasons[pod].Message)
	}
}

// waitFloorEngaged waits until the resource's FloorEngaged condition is
// there (want true) or gone, and returns its message.
func waitFloorEngaged(t *testing.T, ns, name string, want bool) string {
	t.Helper()
	msg := ""
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("condition FloorEngaged present: %v", want), func() error {
		swh := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, swh); err != nil {
			return err
		}
		c := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionFloorEngaged)
		if (c != nil) != want {
			return fmt.Errorf("conditions %+v", swh.Status.Conditions)
		}
		if c != nil {
			msg = c.Message
		}
		return nil
	})
	return msg
}

// TestPortFloor: four pods over two nodes behind a port whose floor is 2
// (or 50%), three of them failing at once. Closed withdraws them as their
// probes say; Open publishes all four ready, the failing ones marked
// floor-open; Freeze keeps the four published ready, marked
// floor-frozen; each within a period and a second of the failure, and
// with no pod of those withdrawn meanwhile. Once two pass again, the one
// still failing is withdrawn. Then, the port dropping below again with
// that pod out: Open publishes it again, Freeze leaves it out.
func TestPortFloor(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	const period = time.Second // resource's periodSeconds
	budget := period + time.Second
	for _, tc := range []struct {
		name string
		min  intstr.IntOrString
		mode swhv1alpha1.FloorMode
	}{
		{"closed", intstr.FromInt32(2), swhv1alpha1.FloorClosed},
		{"open", intstr.FromInt32(2), swhv1alpha1.FloorOpen},
		{"open-percent", intstr.FromString("50%"), swhv1alpha1.FloorOpen},
		{"freeze", intstr.FromInt32(2), swhv1alpha1.FloorFreeze},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			name := "floor-" + tc.name
			pod := func(p string) string { return name + "-" + p }
			b := map[string]*backend{}
			for _, p := range []struct{ name, node string }{{"a1", nodeA}, {"a2", nodeA}, {"b1", nodeB}, {"b2", nodeB}} {
				b[p.name] = startBackend(t, ns, name, pod(p.name), p.node)
			}
			swh := resource(ns, name, []swhv1alpha1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080),
				Floor: &swhv1alpha1.PortFloor{MinPassing: tc.min, Below: tc.mode}}}, fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
			if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
				t.Fatal(err)
			}
			w := watchFloor(t, ns, name, "web")
			w.wait(t, 30*time.Second, pod("a1")+":T/", pod("a2")+":T/", pod("b1")+":T/", pod("b2")+":T/")
			floored := tc.mode != swhv1alpha1.FloorClosed
			reason := map[swhv1alpha1.FloorMode]string{swhv1alpha1.FloorOpen: swhv1alpha1.ReasonFloorOpen, swhv1alpha1.FloorFreeze: swhv1alpha1.ReasonFloorFrozen}[tc.mode]
			failing := func(p string) string {
				if floored {
					return pod(p) + ":T/" + reason
				}
				return pod(p) + ":F/http-status"
			}
			fail := func(status int, pods ...string) time.Time {
				at := time.Now()
				for _, p := range pods {
					b[p].http.SetStatus(status)
				}
				return at
			}

			// Three of four fail at once: one passes, the floor is 2.
			t0 := fail(http.StatusServiceUnavailable, "a1", "a2", "b1")
			at := w.wait(t, 20*time.Second, failing("a1"), failing("a2"), failing("b1"), pod("b2")+":T/")
			d := at.Sub(t0)
			t.Logf("%s: three of four pods failed; published by the mode %v after the failure (%v after the agents' first write)",
				tc.mode, d.Round(time.Millisecond), at.Sub(w.firstChange(t0)).Round(time.Millisecond))
			if floored && d > budget {
				t.Errorf("published by the mode %v after the failure, more than a period and a second (%v)", d, budget)
			}
			if floored {
				if out := w.withdrawals(t0, pod("a1"), pod("a2"), pod("b1"), pod("b2")); len(out) > 0 {
					t.Errorf("pods kept by the floor were withdrawn for a moment: %v", out)
				}
				t.Logf("condition: %s", waitFloorEngaged(t, ns, name, true))
				logReasons(t, ns, name)
			}

			// Two pass again: the floor is reached, the one failing leaves.
			t1 := fail(http.StatusOK, "a1", "b1")
			d = w.wait(t, 20*time.Second, pod("a1")+":T/", pod("a2")+":F/http-status", pod("b1")+":T/", pod("b2")+":T/").Sub(t1)
			t.Logf("%s: two recovered; the one still failing withdrawn %v after", tc.mode, d.Round(time.Millisecond))
			waitFloorEngaged(t, ns, name, false)

			// Below again, a2 out: Open publishes it, Freeze does not.
			t2 := fail(http.StatusServiceUnavailable, "a1", "b1")
			a2 := pod("a2") + ":F/http-status"
			if tc.mode == swhv1alpha1.FloorOpen {
				a2 = pod("a2") + ":T/" + reason
			}
			at = w.wait(t, 20*time.Second, failing("a1"), a2, failing("b1"), pod("b2")+":T/")
			d = at.Sub(t2)
			t.Logf("%s: below again with a pod out; published by the mode %v after the failure (%v after the agents' first write)",
				tc.mode, d.Round(time.Millisecond), at.Sub(w.firstChange(t2)).Round(time.Millisecond))
			if floored && d > budget {
				t.Errorf("published by the mode %v after the failure, more than a period and a second (%v)", d, budget)
			}
			if floored {
				if out := w.withdrawals(t2, pod("a1"), pod("b1"), pod("b2")); len(out) > 0 {
					t.Errorf("pods kept by the floor were withdrawn for a moment: %v", out)
				}
			}
			if floored {
				logReasons(t, ns, name)
			}
			if tc.mode == swhv1alpha1.FloorFreeze && w.becameReady(t2, pod("a2")) {
				t.Errorf("Freeze published %s, which was out when the port went below", pod("a2"))
			}

			// All pass: no floor reason left, no condition.
			fail(http.StatusOK, "a1", "a2", "b1")
			w.wait(t, 20*time.Second, pod("a1")+":T/", pod("a2")+":T/", pod("b1")+":T/", pod("b2")+":T/")
			waitFloorEngaged(t, ns, name, false)
		})
	}
}
