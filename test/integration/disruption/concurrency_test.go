package disruption_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// TestConcurrentEvictions sends thirty evictions of the three brokers at
// once through the two guard replicas: the budget allows one disruption,
// so exactly one broker may go and exactly one reservation may be written,
// whichever replica decides what.
func TestConcurrentEvictions(t *testing.T) {
	ctx := context.Background()
	k := newKafka(t, budgetMaxUnavailable(1))
	reservations := watchReservations(t, k.ns)
	servedBefore := [2]int64{balancer.served[0].Load(), balancer.served[1].Load()}
	balancer.take()

	const n = 30
	type result struct {
		pod     string
		err     error
		latency time.Duration
	}
	results := make([]result, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			pod := brokerName(i % 3)
			start.Wait()
			t0 := time.Now()
			err := evict(ctx, k.ns, pod, false)
			results[i] = result{pod: pod, err: err, latency: time.Since(t0)}
		}()
	}
	start.Done()
	done.Wait()
	seen := reservations()

	allowedPods := map[string]int{}
	var latencies []time.Duration
	for _, r := range results {
		latencies = append(latencies, r.latency)
		switch {
		case r.err == nil:
			allowedPods[r.pod]++
		case apierrors.IsTooManyRequests(r.err):
		default:
			t.Errorf("eviction of %s: %v (want success or 429)", r.pod, r.err)
		}
	}
	if len(allowedPods) != 1 {
		t.Errorf("evictions allowed per broker: %v, want exactly one broker evicted", allowedPods)
	}
	if len(seen) != 1 {
		t.Errorf("reservations written: %v, want exactly one", keys(seen))
	}
	terminating := 0
	for i := range 3 {
		pod := &corev1.Pod{}
		if err := controlPlane.Client.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: brokerName(i)}, pod); err != nil {
			t.Fatal(err)
		}
		if pod.DeletionTimestamp != nil {
			terminating++
		}
	}
	if terminating != 1 {
		t.Errorf("%d brokers are being deleted, want 1", terminating)
	}
	served := [2]int64{balancer.served[0].Load() - servedBefore[0], balancer.served[1].Load() - servedBefore[1]}
	if served[0] == 0 || served[1] == 0 {
		t.Errorf("webhook calls per replica %v: both replicas should have decided", served)
	}
	webhook := balancer.take()
	if len(webhook) < n {
		t.Fatalf("%d webhook calls timed, want at least %d", len(webhook), n)
	}
	t.Logf("FIGURE concurrent-evictions n=%d allowed=%v reservations=%d per-replica=%v", n, allowedPods, len(seen), served)
	t.Logf("FIGURE eviction-latency (client, through the API server) %s", quantiles(latencies))
	t.Logf("FIGURE webhook-latency (API server → guard → answer) %s", quantiles(webhook))

	// The same decisions one at a time (dry runs of a broker still there:
	// denied, the budget being spent), for the cost of one decision alone.
	var remaining string
	for i := range 3 {
		if allowedPods[brokerName(i)] == 0 {
			remaining = brokerName(i)
		}
	}
	for range 10 {
		if err := evict(ctx, k.ns, remaining, true); !apierrors.IsTooManyRequests(err) {
			t.Fatalf("dry-run eviction of %s after the burst: %v, want 429", remaining, err)
		}
	}
	t.Logf("FIGURE webhook-latency sequential %s", quantiles(balancer.take()))
}

// quantiles formats p50, p99 and max of ds.
func quantiles(ds []time.Duration) string {
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(100 * time.Microsecond)
	}
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(ds), q(0.50), q(0.99), ds[len(ds)-1].Round(100*time.Microsecond))
}

// TestDryRunChangesNothing: a dry-run eviction is answered as a real one
// would be and writes no reservation, in the request's options or only in
// the Eviction's deleteOptions (kubectl drain --dry-run=server).
func TestDryRunChangesNothing(t *testing.T) {
	ctx := context.Background()
	k := newKafka(t, budgetMaxUnavailable(1))
	harness.Eventually(t, 10*time.Second, "the disruption status", func() error {
		if st := k.resource(t).Status.Disruption; st == nil || st.DisruptionsAllowed != 1 {
			return fmt.Errorf("status.disruption = %+v", st)
		}
		return nil
	})
	reservations := watchReservations(t, k.ns)
	for range 3 {
		if err := evict(ctx, k.ns, brokerName(1), true); err != nil {
			t.Fatalf("dry-run eviction: %v", err)
		}
		if err := evictDryRunRequest(ctx, k.ns, brokerName(1)); err != nil {
			t.Fatalf("dry-run eviction (dryRun in the request): %v", err)
		}
	}
	if seen := reservations(); len(seen) != 0 {
		t.Errorf("dry runs wrote reservations: %v", keys(seen))
	}
	if st := k.resource(t).Status.Disruption; st == nil || st.DisruptionsAllowed != 1 || len(st.Reservations) != 0 {
		t.Errorf("status.disruption after dry runs = %+v, want 1 allowed and no reservation", st)
	}
	pod := &corev1.Pod{}
	if err := controlPlane.Client.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: brokerName(1)}, pod); err != nil || pod.DeletionTimestamp != nil {
		t.Fatalf("a dry run deleted the pod: %v %v", err, pod.DeletionTimestamp)
	}
	// A dry run is denied as the real eviction would be.
	k.setInSync(2, false)
	k.waitPassing(t, map[string]bool{brokerName(2): false})
	harness.Eventually(t, 10*time.Second, "a dry run denied while the budget is spent", func() error {
		if err := evict(ctx, k.ns, brokerName(1), true); !apierrors.IsTooManyRequests(err) {
			return fmt.Errorf("dry run: %v, want 429", err)
		}
		return nil
	})
}

// TestReservationExpires: the guard allows an eviction that the API server
// then refuses (a PodDisruptionBudget that allows nothing). The pod stays,
// its reservation holds the budget, and a retry of the same pod is allowed
// again by the guard; after the timeout the reservation is gone.
func TestReservationExpires(t *testing.T) {
	ctx := context.Background()
	k := newKafka(t, budgetMaxUnavailable(1))
	k.createPDB(t, 0, 0)
	err := evict(ctx, k.ns, brokerName(1), false)
	if !apierrors.IsTooManyRequests(err) || !contains(err, "violate the pod's disruption budget") {
		t.Fatalf("eviction under a PDB that allows nothing: %v, want the PDB's 429", err)
	}
	st := k.resource(t).Status.Disruption
	if st == nil || len(st.Reservations) != 1 || st.Reservations[0].Pod != brokerName(1) {
		t.Fatalf("reservations = %+v, want kafka-1's", st)
	}
	// The reservation holds the budget: kafka-2 is refused by the guard…
	if err := evict(ctx, k.ns, brokerName(2), false); !apierrors.IsTooManyRequests(err) || !contains(err, "kafka-1 (its eviction was allowed)") {
		t.Fatalf("eviction of kafka-2: %v, want the guard's 429 naming kafka-1's reservation", err)
	}
	// …while kafka-1 itself passes the guard again (and the PDB refuses).
	if err := evict(ctx, k.ns, brokerName(1), false); !contains(err, "violate the pod's disruption budget") {
		t.Fatalf("retried eviction of kafka-1: %v, want the PDB's refusal", err)
	}
	harness.Eventually(t, reservationTimeout+10*time.Second, "the reservation to expire", func() error {
		if st := k.resource(t).Status.Disruption; st == nil || len(st.Reservations) != 0 || st.DisruptionsAllowed != 1 {
			return fmt.Errorf("status.disruption = %+v", st)
		}
		return nil
	})
	if err := evict(ctx, k.ns, brokerName(2), false); !contains(err, "violate the pod's disruption budget") {
		t.Fatalf("eviction of kafka-2 after the expiry: %v, want the guard to allow it (the PDB refuses)", err)
	}
}

// watchReservations watches the resources of ns until the returned
// function is called, and returns every reservation seen in between.
func watchReservations(t *testing.T, ns string) func() map[string]bool {
	t.Helper()
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &swhv1alpha1.ServiceWithHealthchecksList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	delivered := map[string]bool{} // resourceVersions the watch delivered
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			swh, ok := ev.Object.(*swhv1alpha1.ServiceWithHealthchecks)
			if !ok {
				continue
			}
			mu.Lock()
			delivered[swh.ResourceVersion] = true
			if st := swh.Status.Disruption; st != nil {
				for _, r := range st.Reservations {
					seen[r.Pod+"/"+string(r.UID)+"@"+r.Time.String()] = true
				}
			}
			mu.Unlock()
		}
	}()
	return func() map[string]bool {
		// Until the watch has delivered the resource as it is now.
		harness.Eventually(t, 10*time.Second, "the watch delivering the latest resource", func() error {
			cur := &swhv1alpha1.ServiceWithHealthchecks{}
			if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "kafka"}, cur); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if !delivered[cur.ResourceVersion] {
				return fmt.Errorf("resourceVersion %s not delivered yet", cur.ResourceVersion)
			}
			return nil
		})
		w.Stop()
		<-watched
		return seen
	}
}

func contains(err error, s string) bool {
	return err != nil && len(s) > 0 && strings.Contains(err.Error(), s)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
