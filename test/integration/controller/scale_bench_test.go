package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// Settings of BenchmarkControllerScale.
const (
	// defaultScaleResources is how many resources a run creates in each
	// phase unless SWH_SCALE_RESOURCES says otherwise.
	defaultScaleResources = 10000
	// scaleCreators create the resources in parallel, in both phases.
	scaleCreators = 16
	// defaultSteadyWindow is how long the settled controller is watched for
	// writes unless SWH_SCALE_STEADY says otherwise.
	defaultSteadyWindow = time.Minute
	// quietFor is how long a process's write count must stay unchanged
	// for its writes to be over (events are sent asynchronously).
	quietFor = 5 * time.Second
)

// writeMethods are the HTTP methods that write.
var writeMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// BenchmarkControllerScale creates SWH_SCALE_RESOURCES resources (10,000 by
// default) in one namespace at once, twice, and compares side by side in
// one run:
//
//   - the controller: bin/swh-controller as a process, with its default
//     client limits, against a real kube-apiserver. It measures the time until every child Service exists and every
//     status has settled; the controller's write requests (its
//     rest_client_requests_total, scraped from its /metrics on loopback);
//     its memory (VmRSS before the resources exist and once they have
//     settled, VmHWM); and its writes once settled: during an idle window
//     (SWH_SCALE_STEADY, a minute by default) and during a full pass over
//     every resource by a restarted controller. The pass is what a resync
//     makes the reconciler do; controller-runtime's default resync period
//     is 10 hours and the binary has no flag to shorten it.
//   - raw: with the controller stopped, a plain client making the writes the
//     controller makes for each resource (the server-side apply of the
//     child Service, the status update, the event), at the controller's
//     QPS and burst, read from the binary's own flag defaults, with as many
//     workers as the controller has reconcilers.
//
// Each phase has a control plane of its own (kube-apiserver and etcd, with
// the suite's flags), started for it and stopped after it: what one phase
// leaves behind (for the controller, every version of the namespace's
// ConfigMap swh-services in etcd and in the API server's watch cache)
// would slow the other. The same benchmark code creates the resources and
// waits for them in both phases. It checks that both leave the same Service, status and event, and
// prints one table. Run it with `make bench-controller`
// (SWH_SCALE_RESOURCES=1000 for a short run); it needs bin/swh-controller.
func BenchmarkControllerScale(b *testing.B) {
	resources := defaultScaleResources
	if n, err := strconv.Atoi(os.Getenv("SWH_SCALE_RESOURCES")); err == nil && n > 0 {
		resources = n
	}
	steady := defaultSteadyWindow
	if d, err := time.ParseDuration(os.Getenv("SWH_SCALE_STEADY")); err == nil && d > 0 {
		steady = d
	}
	binDir, err := harness.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(binDir, "swh-controller")
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("%s not built (make build): %v", bin, err)
	}
	limits, err := controllerLimits(bin)
	if err != nil {
		b.Fatal(err)
	}
	samples := []string{scaleName(0), scaleName(resources - 1)}
	for range b.N {
		ctx := context.Background()
		c := controllerPhase(b, ctx, bin, resources, steady, samples)
		r := rawPhase(b, ctx, resources, limits, samples)
		for i, name := range samples {
			if err := sameWrites(c.written[i], r.written[i]); err != nil {
				b.Fatalf("the raw client does not write what the controller writes on %s: %v", name, err)
			}
		}

		n := float64(resources)
		ratio := c.settled.Seconds() / r.settled.Seconds()
		perResource := float64(c.settledRSS-c.idleRSS) / n
		ctrlWrites, rawWrites := c.load.writes()/n, float64(r.writes)/n
		steadyWrites := c.idle.writes() + c.pass.writes()
		b.ReportMetric(c.settled.Seconds(), "s-to-settle")
		b.ReportMetric(r.settled.Seconds(), "s-raw")
		b.ReportMetric(ratio, "controller/raw")
		b.ReportMetric(float64(c.peakRSS)/1024, "MiB-peak-rss")
		b.ReportMetric(perResource, "KiB/resource")
		b.ReportMetric(ctrlWrites, "writes/resource")
		b.ReportMetric(rawWrites, "raw-writes/resource")
		b.ReportMetric(steadyWrites, "steady-writes")

		fmt.Printf("\ncontroller scale: %d resources (1 port, single-stack) in each phase; client limits of swh-controller's defaults: QPS %g, burst %d, %d reconcilers\n",
			resources, limits.qps, limits.burst, limits.workers)
		fmt.Println("| resources | controller: time to settle | raw client: time to settle | controller / raw | controller peak RSS | memory per resource (settled − idle RSS) | peak RSS per resource | writes per resource: controller | writes per resource: raw | steady-state writes (idle window + a full pass after a restart) |")
		fmt.Println("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		fmt.Printf("| %d | %.1f s | %.1f s | %.2f | %.1f MiB | %.1f KiB | %.1f KiB | %.2f | %.2f | %d (%d in %v + %d in a pass of %.1f s) |\n",
			resources, c.settled.Seconds(), r.settled.Seconds(), ratio, float64(c.peakRSS)/1024, perResource, float64(c.peakRSS)/n,
			ctrlWrites, rawWrites, int(steadyWrites), int(c.idle.writes()), steady, int(c.pass.writes()), c.passTime.Seconds())
		fmt.Printf("controller: created in %.1f s; RSS idle %.1f MiB, settled %.1f MiB, after the restart's pass %.1f MiB; writes while settling by method %s (Service applies %d, status updates %s, access writes %s); in the idle window %s; in the restart's pass %s; machine load (1, 5, 15 min) %s\n",
			c.created.Seconds(), float64(c.idleRSS)/1024, float64(c.settledRSS)/1024, float64(c.passRSS)/1024,
			c.load.byMethod(), int(c.load.sum("swh_controller_service_writes_total", nil)),
			c.load.byLabel("swh_controller_status_writes_total", "result"), c.load.byLabel("swh_controller_access_writes_total", "result"),
			c.idle.byMethod(), c.pass.byMethod(), c.machineLoad)
		fmt.Printf("controller: CPU %.1f s while settling; time in Reconcile: servicewithhealthchecks %.1f s, access %.1f s; ConfigMap swh-services %s\n",
			c.cpu, c.load.sum("controller_runtime_reconcile_time_seconds_sum", map[string]string{"controller": "servicewithhealthchecks"}),
			c.load.sum("controller_runtime_reconcile_time_seconds_sum", map[string]string{"controller": "access"}), c.configMap)
		fmt.Printf("raw client: created in %.1f s; writes sent %d (%d per resource: Service apply, status update, event), counted at its transport; machine load %s\n\n",
			r.created.Seconds(), r.writes, rawWritesPerResource, r.machineLoad)
	}
}

// controllerRun is what the controller phase measured.
type controllerRun struct {
	created, settled time.Duration
	// idleRSS, settledRSS and peakRSS are in KiB: VmRSS with no resources,
	// VmRSS when every status had settled, VmHWM then.
	idleRSS, settledRSS, peakRSS int
	// load is what the controller did from idle until settled and quiet;
	// idle during the idle window after that; pass all the restarted
	// controller did until it had reconciled everything and was quiet.
	load, idle, pass metrics
	passTime         time.Duration
	passRSS          int
	// cpu is the controller's CPU time from idle until settled and quiet.
	cpu float64
	// configMap describes the access ConfigMap once settled.
	configMap string
	// written is what the controller wrote on the sample resources.
	written []written
	// machineLoad is the load average at the end of the phase.
	machineLoad string
}

// scaleNamespace holds the resources of a phase, on its own control plane.
const scaleNamespace = "scale"

// startScaleControlPlane starts a control plane with the suite's flags for
// one phase; the phase stops it.
func startScaleControlPlane(b *testing.B, ctx context.Context) *harness.ControlPlane {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cp, err := harness.StartControlPlane(ctx, harness.ControlPlaneOptions{ExtraAPIServerFlags: apiServerFlags})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cp.Stop() })
	if err := harness.EnsureNamespace(ctx, cp.Client, scaleNamespace); err != nil {
		b.Fatal(err)
	}
	return cp
}

// readSamples reads what the phase wrote on the sample resources.
func readSamples(b *testing.B, ctx context.Context, cp *harness.ControlPlane, names []string) []written {
	out := make([]written, 0, len(names))
	for _, name := range names {
		w, err := readWritten(ctx, cp, scaleNamespace, name)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// controllerPhase starts a control plane and the controller, creates n
// resources and measures the controller until they have settled, then
// watches it idle, then restarts it for a full pass; it stops the
// controller and the control plane before returning.
func controllerPhase(b *testing.B, ctx context.Context, bin string, n int, steady time.Duration, samples []string) controllerRun {
	var run controllerRun
	cp := startScaleControlPlane(b, ctx)
	p := startControllerProcess(b, cp, bin)
	if err := p.waitReady(ctx, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	before := p.quiet(b, ctx)
	run.idleRSS = procStatusKiB(b, p.pid(), "VmRSS")
	cpuBefore := cpuSeconds(b, p.pid())
	run.created, run.settled = load(b, ctx, cp, n, 0, nil)
	run.settledRSS = procStatusKiB(b, p.pid(), "VmRSS")
	run.peakRSS = procStatusKiB(b, p.pid(), "VmHWM")
	settled := p.quiet(b, ctx)
	run.load = settled.minus(before)
	run.cpu = cpuSeconds(b, p.pid()) - cpuBefore

	time.Sleep(steady)
	run.idle = p.scrape(b, ctx).minus(settled)
	p.stop(b)

	// A full pass: every resource reconciled once more from a fresh cache,
	// as a resync does from the cache it has.
	all := &metav1.PartialObjectMetadataList{}
	all.SetGroupVersionKind(swhv1alpha1.GroupVersion.WithKind("ServiceWithHealthchecksList"))
	if err := cp.Client.List(ctx, all); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	p = startControllerProcess(b, cp, bin)
	if err := p.waitReady(ctx, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	reconciler := map[string]string{"controller": "servicewithhealthchecks"}
	for {
		m := p.scrape(b, ctx)
		if m.sum("controller_runtime_reconcile_total", reconciler) >= float64(len(all.Items)) &&
			m.sum("workqueue_depth", map[string]string{"name": "servicewithhealthchecks"}) == 0 {
			break
		}
		if time.Since(start) > settleTimeout(n) {
			b.Fatalf("the restarted controller did not reconcile %d resources within %v", len(all.Items), settleTimeout(n))
		}
		time.Sleep(250 * time.Millisecond)
	}
	run.passTime = time.Since(start)
	run.pass = p.quiet(b, ctx)
	run.passRSS = procStatusKiB(b, p.pid(), "VmRSS")
	p.stop(b)
	run.configMap = accessConfigMap(ctx, cp, n)
	run.written = readSamples(b, ctx, cp, samples)
	run.machineLoad = harness.LoadAverage()
	if err := cp.Stop(); err != nil {
		b.Fatal(err)
	}
	return run
}

// rawRun is what the raw phase measured.
type rawRun struct {
	created, settled time.Duration
	// writes is the number of write requests the raw client sent.
	writes int64
	// written is what the raw client wrote on the sample resources.
	written []written
	// machineLoad is the load average at the end of the phase.
	machineLoad string
}

// rawWritesPerResource is what rawClient.write sends for one resource.
const rawWritesPerResource = 3

// rawPhase starts a control plane, creates n resources with no controller
// running, and makes the controller's writes for each with a plain client;
// it stops the control plane before returning.
func rawPhase(b *testing.B, ctx context.Context, n int, limits clientLimits, samples []string) rawRun {
	cp := startScaleControlPlane(b, ctx)
	raw, err := newRawClient(cp, limits)
	if err != nil {
		b.Fatal(err)
	}
	var run rawRun
	run.created, run.settled = load(b, ctx, cp, n, limits.workers, raw.write)
	run.writes = raw.writes.Load()
	if want := int64(rawWritesPerResource * n); run.writes != want {
		b.Fatalf("the raw client sent %d writes, want %d", run.writes, want)
	}
	run.written = readSamples(b, ctx, cp, samples)
	run.machineLoad = harness.LoadAverage()
	if err := cp.Stop(); err != nil {
		b.Fatal(err)
	}
	return run
}

// settleTimeout bounds a phase: generous, the machine may be busy.
func settleTimeout(n int) time.Duration {
	return 5*time.Minute + time.Duration(n)*100*time.Millisecond
}

// scaleName names the i-th resource of a phase; both phases use the same
// names, in their own namespaces.
func scaleName(i int) string { return fmt.Sprintf("r%05d", i) }

// load creates n resources in scaleNamespace, scaleCreators at a time, hands each one
// created to write (run by writers goroutines) when write is not nil, and
// returns when every status has settled: the times from the start until
// the last creation and until the last status settled.
func load(b *testing.B, ctx context.Context, cp *harness.ControlPlane, n, writers int, write func(context.Context, *swhv1alpha1.ServiceWithHealthchecks) error) (created, settled time.Duration) {
	timeout := settleTimeout(n)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("not settled within %v", timeout))
	defer cancel()
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() {
			firstErr = err
			cancel()
		})
	}
	start := time.Now()
	settledErr := make(chan error, 1)
	go func() { settledErr <- waitSettled(ctx, cp, n) }()

	made := make(chan *swhv1alpha1.ServiceWithHealthchecks, n)
	var writing sync.WaitGroup
	if write != nil {
		for range writers {
			writing.Go(func() {
				for r := range made {
					if ctx.Err() != nil {
						continue
					}
					if err := write(ctx, r); err != nil {
						fail(err)
					}
				}
			})
		}
	}
	work := make(chan int)
	var creating sync.WaitGroup
	for range scaleCreators {
		creating.Go(func() {
			for i := range work {
				r := newResource(scaleNamespace, scaleName(i))
				if err := cp.Client.Create(ctx, r); err != nil {
					fail(fmt.Errorf("creating %s: %w", r.Name, err))
					continue
				}
				if write != nil {
					made <- r
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	creating.Wait()
	created = time.Since(start)
	close(made)
	err := <-settledErr
	settled = time.Since(start)
	writing.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	if err != nil {
		b.Fatalf("%v (%v)", err, context.Cause(ctx))
	}
	return created, settled
}

// isSettled reports whether the status says the Service exists and the
// spec's generation has been seen.
func isSettled(r *swhv1alpha1.ServiceWithHealthchecks) bool {
	return r.Status.ClusterIP != "" && r.Status.ObservedGeneration == r.Generation && r.Status.Ready != ""
}

// waitSettled returns once n resources of scaleNamespace have a settled
// status. It follows them with a watch: listing thousands of resources
// several times a second would load the API server being measured.
func waitSettled(ctx context.Context, cp *harness.ControlPlane, n int) error {
	ns := scaleNamespace
	wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		return fmt.Errorf("creating a watching client: %w", err)
	}
	settled := map[string]bool{}
	count := 0
	set := func(r *swhv1alpha1.ServiceWithHealthchecks, exists bool) {
		now := exists && isSettled(r)
		if now != settled[r.Name] {
			settled[r.Name] = now
			if now {
				count++
			} else {
				count--
			}
		}
	}
	rv := ""
	for {
		if rv == "" {
			list := &swhv1alpha1.ServiceWithHealthchecksList{}
			if err := cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return fmt.Errorf("listing the resources: %w", err)
			}
			clear(settled)
			count = 0
			for i := range list.Items {
				set(&list.Items[i], true)
			}
			rv = list.ResourceVersion
		}
		if count >= n {
			return nil
		}
		w, err := wc.Watch(ctx, &swhv1alpha1.ServiceWithHealthchecksList{}, &client.ListOptions{
			Namespace: ns, Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true},
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rv = ""
			time.Sleep(time.Second)
			continue
		}
	events:
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
				r, ok := ev.Object.(*swhv1alpha1.ServiceWithHealthchecks)
				if !ok {
					continue
				}
				rv = r.ResourceVersion
				if ev.Type != watch.Bookmark {
					set(r, ev.Type != watch.Deleted)
				}
			case watch.Error:
				rv = "" // expired: list again
				break events
			}
			if count >= n {
				break events
			}
		}
		w.Stop()
		if count >= n {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
