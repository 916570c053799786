package disruption_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/disruption"
)

// memoryPods is how many Pending pods the budget selects in
// TestCountMemory, as in the figure.
const memoryPods = 1000

// TestCountMemory: a namespace editor's budget selects 1,000 Pending pods
// whose spec carries a large environment value. One count of the budget
// (the status reconciler's, the same reads as an eviction's) must not hold
// memory in proportion to what the pods carry. Prints, side by side, the
// memory one count allocates and its peak heap growth when the pods are
// read whole (main's way) and as the controller reads them, for a small
// and a large environment value.
func TestCountMemory(t *testing.T) {
	ctx := context.Background()
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	type figure struct{ allocated, peak uint64 }
	results := map[string]map[int]figure{}
	sizes := []int{1 << 10, 128 << 10}
	for _, size := range sizes {
		ns := controlPlane.CleanNamespace(t)
		createBigPods(t, c, ns, size)
		swh := &swhv1alpha1.ServiceWithHealthchecks{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"},
			Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
				Ports:    []swhv1alpha1.ServicePort{{Name: "client", Port: clientPort, TargetPort: intstr.FromInt32(clientPort)}},
				Selector: map[string]string{"app": "big"},
				Healthcheck: &swhv1alpha1.Healthcheck{PeriodSeconds: 10, Probes: []swhv1alpha1.Probe{{Mode: swhv1alpha1.ProbeModeTCP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
					TCP: &swhv1alpha1.TCPProbe{TargetPort: intstr.FromInt32(clientPort)}}}},
				DisruptionBudget: budgetMaxUnavailable(1),
			},
		}
		if err := c.Create(ctx, swh); err != nil {
			t.Fatal(err)
		}
		for name, sources := range map[string]disruption.Sources{
			"whole":                        {Cache: guards[0].cache, APIReader: c},
			"as the controller reads them": productionSources(t, c),
		} {
			r := &disruption.StatusReconciler{Sources: sources, Client: c}
			best := figure{allocated: ^uint64(0), peak: ^uint64(0)}
			for range 3 {
				f := measure(func() {
					if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "big"}}); err != nil {
						t.Fatal(err)
					}
				})
				best.allocated, best.peak = min(best.allocated, f.allocated), min(best.peak, f.peak)
			}
			if results[name] == nil {
				results[name] = map[int]figure{}
			}
			results[name][size] = best
		}
		st := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(swh), st); err != nil {
			t.Fatal(err)
		}
		if d := st.Status.Disruption; d == nil || d.ExpectedPods != memoryPods {
			t.Fatalf("status.disruption %+v, want %d expected pods", d, memoryPods)
		}
	}
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	for _, size := range sizes {
		w, s := results["whole"][size], results["as the controller reads them"][size]
		t.Logf("FIGURE count-memory pods=%d env=%d KiB: allocated per count whole %s vs streamed %s; peak heap growth whole %s vs streamed %s",
			memoryPods, size>>10, mib(w.allocated), mib(s.allocated), mib(w.peak), mib(s.peak))
	}
	// What the pods carry: the streamed count must not hold it, nor
	// allocate it again and again.
	large := results["as the controller reads them"][sizes[1]]
	carried := uint64(memoryPods * sizes[1])
	if large.peak > carried/8 || large.allocated > carried/4 {
		t.Errorf("one count over %d pods of %d KiB: allocated %s, peak heap growth %s; want well under the %s the pods carry",
			memoryPods, sizes[1]>>10, mib(large.allocated), mib(large.peak), mib(carried))
	}
}

// measure runs f and returns the bytes it allocated and the peak growth
// of the live heap while it ran (sampled every millisecond). Other
// goroutines of the test process (agents, controllers) add to both: the
// figures are upper bounds.
func measure(f func()) (out struct{ allocated, peak uint64 }) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > before.HeapAlloc && m.HeapAlloc-before.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc - before.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	out.allocated, out.peak = after.TotalAlloc-before.TotalAlloc, peak.Load()
	return out
}

// createBigPods creates memoryPods Pending pods selected by app=big, each
// with an environment value of size bytes.
func createBigPods(t *testing.T, c client.Client, ns string, size int) {
	t.Helper()
	value := strings.Repeat("x", size)
	var wg sync.WaitGroup
	errs := make(chan error, memoryPods)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("big-%04d", i), Labels: map[string]string{"app": "big"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/big:test",
						Env: []corev1.EnvVar{{Name: "BIG", Value: value}}}}, TerminationGracePeriodSeconds: ptr.To[int64](0)},
				}
				if err := c.Create(context.Background(), pod); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range memoryPods {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating the pods: %v", err)
	}
}
