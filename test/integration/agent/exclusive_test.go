package agent_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// exclusiveWatch follows a resource's slices as a kube-proxy does (one
// watch, events in the API server's order) and keeps, after every event,
// the pods ready or serving on a port, and how long two or more were.
type exclusiveWatch struct {
	w    watch.Interface
	port string

	mu       sync.Mutex
	slices   map[string]*discoveryv1.EndpointSlice
	routable map[string]bool
	changed  chan struct{}
	at       time.Time
	// overlap is the time two or more pods were routable, overlaps how
	// many times it began, since when the current one runs.
	overlap  time.Duration
	overlaps int
	since    time.Time
	ended    bool
	// fewest is the fewest routable pods since resetFewest.
	fewest int
}

// resetFewest starts counting the fewest routable pods from now.
func (x *exclusiveWatch) resetFewest() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.fewest = len(x.routable)
}

// fewestRoutable returns the fewest routable pods since resetFewest.
func (x *exclusiveWatch) fewestRoutable() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.fewest
}

func watchExclusive(t *testing.T, ns, name, port string) *exclusiveWatch {
	t.Helper()
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &discoveryv1.EndpointSliceList{}, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})
	if err != nil {
		t.Fatal(err)
	}
	x := &exclusiveWatch{w: w, port: port, slices: map[string]*discoveryv1.EndpointSlice{}, routable: map[string]bool{}, changed: make(chan struct{})}
	go x.run()
	t.Cleanup(w.Stop)
	return x
}

func (x *exclusiveWatch) run() {
	for ev := range x.w.ResultChan() {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		now := time.Now()
		x.mu.Lock()
		if ev.Type == watch.Deleted {
			delete(x.slices, s.Name)
		} else {
			x.slices[s.Name] = s
		}
		routable := map[string]bool{}
		for _, sl := range x.slices {
			if name, _ := endpoints.SlicePort(sl); name != x.port {
				continue
			}
			for _, ep := range sl.Endpoints {
				if ready, serving, _ := endpoints.Conditions(ep.Conditions); (ready || serving) && ep.TargetRef != nil {
					routable[ep.TargetRef.Name] = true
				}
			}
		}
		switch {
		case len(routable) >= 2 && x.since.IsZero():
			x.since = now
			x.overlaps++
		case len(routable) < 2 && !x.since.IsZero():
			x.overlap += now.Sub(x.since)
			x.since = time.Time{}
		}
		x.routable, x.at = routable, now
		x.fewest = min(x.fewest, len(routable))
		close(x.changed)
		x.changed = make(chan struct{})
		x.mu.Unlock()
	}
	x.mu.Lock()
	x.ended = true
	close(x.changed)
	x.mu.Unlock()
}

// wait waits until the routable pods are exactly want, and returns when
// the event that made them so arrived.
func (x *exclusiveWatch) wait(t *testing.T, timeout time.Duration, want ...string) time.Time {
	t.Helper()
	sort.Strings(want)
	deadline := time.After(timeout)
	for {
		x.mu.Lock()
		got := make([]string, 0, len(x.routable))
		for pod := range x.routable {
			got = append(got, pod)
		}
		sort.Strings(got)
		at, changed, ended := x.at, x.changed, x.ended
		x.mu.Unlock()
		if strings.Join(got, ",") == strings.Join(want, ",") {
			return at
		}
		if ended {
			t.Fatal("the slice watch ended")
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("routable pods on port %q: got %v, want %v", x.port, got, want)
		}
	}
}

// twoRoutable returns how long two or more pods were routable, and how
// many times, up to now.
func (x *exclusiveWatch) twoRoutable() (time.Duration, int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	d := x.overlap
	if !x.since.IsZero() {
		d += time.Since(x.since)
	}
	return d, x.overlaps
}

// episodes is SWH_EXCLUSIVE_EPISODES, or n.
func episodes(t *testing.T, n int) int {
	if v := os.Getenv("SWH_EXCLUSIVE_EPISODES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SWH_EXCLUSIVE_EPISODES=%q: want a positive number", v)
		}
	}
	return n
}

// primaries starts two pods of app "db", one per node, whose TCP server on
// 2525 stands for a database that answers the write query true: a TCP
// probe passes on both, as a write probe does on two primaries.
func primaries(t *testing.T, ns string, exclusive *swhv1alpha1.Exclusive) (map[string]*backend, *swhv1alpha1.ServiceWithHealthchecks) {
	t.Helper()
	pods := map[string]*backend{
		"db-a": startBackend(t, ns, "db", "db-a", nodeA),
		"db-b": startBackend(t, ns, "db", "db-b", nodeB),
	}
	swh := resource(ns, "db", []swhv1alpha1.ServicePort{{Name: "write", Port: 5432, TargetPort: intstr.FromInt32(2525)}},
		fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525)))
	swh.Spec.Exclusive = exclusive
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	return pods, swh
}

// holderOf waits for one pod to be routable and returns it and the other.
func holderOf(t *testing.T, x *exclusiveWatch) (holder, other string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, "one routable pod", func() error {
		x.mu.Lock()
		defer x.mu.Unlock()
		if len(x.routable) != 1 {
			return fmt.Errorf("routable: %v", x.routable)
		}
		for pod := range x.routable {
			holder = pod
		}
		return nil
	})
	if holder == "db-a" {
		return holder, "db-b"
	}
	return holder, "db-a"
}

// TestExclusivePortNeverRoutesTwoPrimaries: two pods pass the write port's
// probe (two primaries, a split brain). Without spec.exclusive both are
// published ready, as today; with it, a slice watch never sees two pods
// routable, through failovers from a primary that fails and back (each
// old primary passing again while the new one holds the port).
func TestExclusivePortNeverRoutesTwoPrimaries(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)

	t.Run("without exclusive", func(t *testing.T) {
		ns := namespace(t)
		x := watchExclusive(t, ns, "db", "write")
		primaries(t, ns, nil)
		x.wait(t, 30*time.Second, "db-a", "db-b")
		time.Sleep(time.Second)
		d, n := x.twoRoutable()
		if n == 0 {
			t.Fatalf("both primaries are published, yet the watch saw two routable pods %d times (%s)", n, d)
		}
		t.Logf("without exclusive: two routable pods from the start, %s by now", d.Round(time.Millisecond))
	})

	ns := namespace(t)
	x := watchExclusive(t, ns, "db", "write")
	pods, _ := primaries(t, ns, &swhv1alpha1.Exclusive{LeaseDurationSeconds: 3})
	holder, other := holderOf(t, x)
	waitReason(t, ns, "db", other, swhv1alpha1.ReasonExclusiveStandby)
	waitHolderStatus(t, ns, "db", holder)
	checkPluginShowsHolder(t, ns, holder, other)

	var failovers []time.Duration
	for i := range episodes(t, 6) {
		stopped := time.Now()
		if err := pods[holder].smtp.Stop(); err != nil {
			t.Fatal(err)
		}
		failovers = append(failovers, x.wait(t, 30*time.Second, other).Sub(stopped))
		if err := pods[holder].smtp.Start(); err != nil {
			t.Fatal(err)
		}
		// Two primaries again: the old one passes and stands by.
		waitReason(t, ns, "db", holder, swhv1alpha1.ReasonExclusiveStandby)
		if d, n := x.twoRoutable(); n > 0 {
			t.Fatalf("episode %d: two pods routable %d times, %s in all", i, n, d)
		}
		holder, other = other, holder
	}
	d, n := x.twoRoutable()
	t.Logf("%d dual-primary episodes: two routable pods %d times, %s; failover after the primary fails (probe period 1 s, failureThreshold 1): %s",
		len(failovers), n, d, durationQuantiles(failovers))
	if n > 0 {
		t.Fatalf("two pods routable %d times, %s in all", n, d)
	}
}

// TestExclusivePortPartitionedHolder: the holder's agent stops (its node
// lost the API server) while its pod still passes. The controller
// withdraws that pod once the Lease expires and frees the Lease; the other
// node's agent then publishes its pod, and never both. The agent that
// comes back finds the port held and keeps its pod standing by.
func TestExclusivePortPartitionedHolder(t *testing.T) {
	agents := map[string]*agent{nodeA: startAgent(t, nodeA), nodeB: startAgent(t, nodeB)}
	ns := namespace(t)
	x := watchExclusive(t, ns, "db", "write")
	const lease = 3 * time.Second
	primaries(t, ns, &swhv1alpha1.Exclusive{LeaseDurationSeconds: int32(lease / time.Second)})
	holder, other := holderOf(t, x)
	holderNode := map[string]string{"db-a": nodeA, "db-b": nodeB}[holder]

	cut := time.Now()
	agents[holderNode].Stop()
	// The Lease counts from the holder's last renewal, which may come
	// before the agent stops by up to a renewal interval: the bound is
	// measured from it, not from the stop.
	held := &coordinationv1.Lease{}
	if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "swh.db.write"}, held); err != nil {
		t.Fatal(err)
	}
	if held.Spec.RenewTime == nil {
		t.Fatal("the held Lease has no renewTime")
	}
	switched := x.wait(t, 30*time.Second, other)
	failover := switched.Sub(cut)
	sinceRenewal := switched.Sub(held.Spec.RenewTime.Time)
	if sinceRenewal < lease {
		t.Fatalf("failed over %s after the holder's last renewal (%s after its agent stopped), within the Lease's %s", sinceRenewal, failover, lease)
	}
	waitHolderStatus(t, ns, "db", other)

	agents[holderNode] = startAgent(t, holderNode)
	waitReason(t, ns, "db", holder, swhv1alpha1.ReasonExclusiveStandby)
	if d, n := x.twoRoutable(); n > 0 {
		t.Fatalf("two pods routable %d times, %s in all", n, d)
	}
	t.Logf("failover after the holder's agent stopped (Lease %s): %s (%s after its last renewal)", lease, failover.Round(time.Millisecond), sinceRenewal.Round(time.Millisecond))
}

// waitHolderStatus waits until the resource's status names pod as the
// holder of port write and its condition ExclusivePortsHeld is True.
func waitHolderStatus(t *testing.T, ns, name, pod string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, "holder "+pod+" in the status", func() error {
		swh := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, swh); err != nil {
			return err
		}
		for _, c := range swh.Status.Conditions {
			if c.Type == swhv1alpha1.ConditionExclusivePortsHeld && c.Status == "True" && len(swh.Status.Ports) == 1 && swh.Status.Ports[0].Holder == pod {
				return nil
			}
		}
		return fmt.Errorf("status %+v", swh.Status)
	})
}

// checkPluginShowsHolder runs kubectl swh status: port write is exclusive,
// held by holder, and other stands by with its reason.
func checkPluginShowsHolder(t *testing.T, ns, holder, other string) {
	t.Helper()
	st, err := pluginStatus(t, operatorKubeconfig(t, ""), namespace(t), ns, "db")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ports) != 1 || !st.Ports[0].Exclusive || !strings.HasPrefix(st.Ports[0].Holder, holder+" on node ") {
		t.Fatalf("kubectl swh status ports: %+v, want write exclusive and held by %s", st.Ports, holder)
	}
	ep, ok := endpointOf(st, "write", other)
	if !ok || ep.Ready || ep.Reason == nil || ep.Reason.Reason != swhv1alpha1.ReasonExclusiveStandby || !strings.Contains(ep.Reason.Message, holder) {
		t.Fatalf("kubectl swh status of %s: %+v, want not ready, standing by for %s", other, ep, holder)
	}
}

// TestExclusivePortMovesWithinANode: two pods of one node pass; the node
// publishes one, and when it fails, the other, never both.
func TestExclusivePortMovesWithinANode(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	x := watchExclusive(t, ns, "db", "write")
	pods := map[string]*backend{
		"db-a": startBackend(t, ns, "db", "db-a", nodeA),
		"db-b": startBackend(t, ns, "db", "db-b", nodeA),
	}
	swh := resource(ns, "db", []swhv1alpha1.ServicePort{{Name: "write", Port: 5432, TargetPort: intstr.FromInt32(2525)}},
		fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525)))
	swh.Spec.Exclusive = &swhv1alpha1.Exclusive{LeaseDurationSeconds: 3}
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	holder, other := holderOf(t, x)
	waitReason(t, ns, "db", other, swhv1alpha1.ReasonExclusiveStandby)
	for range 3 {
		if err := pods[holder].smtp.Stop(); err != nil {
			t.Fatal(err)
		}
		x.wait(t, 30*time.Second, other)
		if err := pods[holder].smtp.Start(); err != nil {
			t.Fatal(err)
		}
		waitReason(t, ns, "db", holder, swhv1alpha1.ReasonExclusiveStandby)
		holder, other = other, holder
	}
	if d, n := x.twoRoutable(); n > 0 {
		t.Fatalf("two pods routable %d times, %s in all", n, d)
	}
}

// TestExclusiveLeaseShortenedWhileHeld: the holder's agent is cut off,
// then the Lease's duration is lowered; the controller still waits the
// duration the holder counted with before it frees the port.
func TestExclusiveLeaseShortenedWhileHeld(t *testing.T) {
	agents := map[string]*agent{nodeA: startAgent(t, nodeA), nodeB: startAgent(t, nodeB)}
	ns := namespace(t)
	x := watchExclusive(t, ns, "db", "write")
	_, swh := primaries(t, ns, &swhv1alpha1.Exclusive{LeaseDurationSeconds: 8})
	holder, other := holderOf(t, x)
	cut := time.Now()
	agents[map[string]string{"db-a": nodeA, "db-b": nodeB}[holder]].Stop()
	// A merge patch: the controller writes the status meanwhile.
	shorter := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"exclusive":{"leaseDurationSeconds":2}}}`))
	if err := controlPlane.Client.Patch(context.Background(), swh, shorter); err != nil {
		t.Fatal(err)
	}
	failover := x.wait(t, 30*time.Second, other).Sub(cut)
	// The holder renewed at most a third of 8 s before it was cut off.
	if failover < 8*time.Second*2/3 {
		t.Fatalf("failed over %s after the holder was cut off: the shortened Lease (2 s) was counted, not the 8 s it held", failover)
	}
	if d, n := x.twoRoutable(); n > 0 {
		t.Fatalf("two pods routable %d times, %s in all", n, d)
	}
	t.Logf("failover after the holder was cut off and its Lease shortened from 8 s to 2 s: %s", failover.Round(time.Millisecond))
}

// TestExclusiveLeaseNameTaken: a Lease of the exclusive port's name that
// is not the resource's is never taken over: the controller says so in
// an event, and the pods stand by with exclusive-no-lease until it goes.
func TestExclusiveLeaseNameTaken(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ns := namespace(t)
	ctx := context.Background()
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "swh.db.write"}}
	if err := controlPlane.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	x := watchExclusive(t, ns, "db", "write")
	primaries(t, ns, &swhv1alpha1.Exclusive{LeaseDurationSeconds: 3})
	waitReason(t, ns, "db", "db-a", swhv1alpha1.ReasonExclusiveNoLease)
	harness.Eventually(t, 20*time.Second, "an ExclusiveLeaseTaken event", func() error {
		list := &eventsv1.EventList{}
		if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == swhv1alpha1.EventReasonExclusiveLeaseTaken {
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(list.Items))
	})
	if err := controlPlane.Client.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	holderOf(t, x)
	if d, n := x.twoRoutable(); n > 0 {
		t.Fatalf("two pods routable %d times, %s in all", n, d)
	}
}
