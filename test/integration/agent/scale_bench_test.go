package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// The ports every pod of BenchmarkAgentScale answers on. One listener per
// port on 0.0.0.0 serves every pod address (10.244.0.0/16 is local inside
// hack/netns.sh), so no other test of the process may listen on these ports
// while it runs: the agent suite's other tests use 8080, 8081, 2525 and 5432.
const (
	scaleWebPort     = 18080
	scaleAdminPort   = 18081
	scaleMetricsPort = 18082
	scalePGPort      = 15432
	// scalePodsPerApp is the size of each resource ("app") of the load.
	scalePodsPerApp = 100
)

// scalePorts are the three ports of every app; each has a probe of its own.
var scalePorts = []swhv1alpha1.ServicePort{
	{Name: "web", Port: 80, TargetPort: intstr.FromString("web")},
	{Name: "admin", Port: 81, TargetPort: intstr.FromString("admin")},
	{Name: "metrics", Port: 82, TargetPort: intstr.FromString("metrics")},
}

// scaleMode is one load of BenchmarkAgentScale: the probes of every app,
// or of the db resource for PostgreSQL.
type scaleMode struct {
	name, shape string
	// probes of each app; nil leaves the apps without probes (PostgreSQL).
	probes []swhv1alpha1.Probe
	// pg runs 3 PostgreSQL probes on the db pods instead.
	pg bool
}

func scaleModes() []scaleMode {
	probe := func(mode swhv1alpha1.ProbeMode, port string) swhv1alpha1.Probe {
		return fastProbe(mode, intstr.FromString(port))
	}
	tcp, web := swhv1alpha1.ProbeModeTCP, swhv1alpha1.ProbeModeHTTP
	return []scaleMode{
		{name: "mixed", shape: "HTTP web, TCP admin, TCP metrics", probes: []swhv1alpha1.Probe{probe(web, "web"), probe(tcp, "admin"), probe(tcp, "metrics")}},
		{name: "TCP", shape: "3 TCP", probes: []swhv1alpha1.Probe{probe(tcp, "web"), probe(tcp, "admin"), probe(tcp, "metrics")}},
		{name: "HTTP", shape: "3 HTTP", probes: []swhv1alpha1.Probe{probe(web, "web"), probe(web, "admin"), probe(web, "metrics")}},
		{name: "PostgreSQL", shape: "3 PostgreSQL queries", pg: true},
	}
}

// BenchmarkAgentScale runs bin/swh-agent for one node carrying
// SWH_BENCH_SCALE_PODS pods (1,000 by default): apps of 100 pods, one
// resource each, with three ports (web, admin, metrics) and a probe per port
// at a 1 s period, against real HTTP listeners on every pod address. It
// runs one load at a time, each with a fresh agent: the footprint's shape
// (1 HTTP + 2 TCP probes per pod), 3 TCP, 3 HTTP, then 3 PostgreSQL queries
// on SWH_BENCH_SCALE_PG_PODS pods (10: a real server forks a backend per
// connection, which costs it tens of milliseconds of CPU on a small virtual
// machine, so 30 connections a second already take about a core). For each
// it reports the probes per second the agent counted, its CPU (utime +
// stime over SWH_BENCH_SCALE_WINDOW, 10 s, after a warm-up), its memory
// and its CPU per probe. Under the first load it flips the web backend of
// SWH_BENCH_SCALE_FLIPS pods (20) to failing and back, one at a time, and
// times the probe result that flips the verdict to the slice change seen by
// a watch, as BenchmarkAgentReaction does; the same on a node of its own
// carrying only those pods gives the figure without load.
// SWH_BENCH_SCALE_MODES (e.g. "TCP,HTTP") picks loads. Run it with
// `make bench-agent`.
func BenchmarkAgentScale(b *testing.B) {
	pods := envInt(b, "SWH_BENCH_SCALE_PODS", 1000)
	pgPods := min(pods, envInt(b, "SWH_BENCH_SCALE_PG_PODS", 10))
	flips := min(pods, envInt(b, "SWH_BENCH_SCALE_FLIPS", 20))
	window := envDuration(b, "SWH_BENCH_SCALE_WINDOW", 10*time.Second)
	modes := scaleModes()
	if v := os.Getenv("SWH_BENCH_SCALE_MODES"); v != "" {
		modes = slices.DeleteFunc(modes, func(m scaleMode) bool {
			return !slices.ContainsFunc(strings.Split(v, ","), func(name string) bool { return strings.EqualFold(strings.TrimSpace(name), m.name) })
		})
	}
	const warmUp, gap = 3 * time.Second, time.Second
	ctx := context.Background()
	fast := *controlPlane.Config
	fast.QPS, fast.Burst = 1000, 2000
	c, err := client.New(&fast, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		started := time.Now()
		ns := controlPlane.CleanNamespace(b)
		loadNode, quietNode := ns+"-load", ns+"-quiet"
		for _, node := range []string{loadNode, quietNode} {
			if _, err := harness.CreateNode(ctx, c, harness.NodeOptions{Name: node, Zone: "zone-a"}); err != nil {
				b.Fatal(err)
			}
		}
		srv := startPodHTTP(b, scaleWebPort, scaleAdminPort, scaleMetricsPort)
		fmt.Printf("agent at scale: bin/swh-agent for one node with %d pods in apps of %d, one resource each with ports web, admin and metrics and one probe per port (period 1 s, timeout 1 s), real HTTP listeners on every pod address; one load at a time, each with a fresh agent, measured over %v after a warm-up of %v; load average %s:\n",
			pods, scalePodsPerApp, window, warmUp, harness.LoadAverage())

		// Without load: the flipped pods alone on a node of their own.
		var quietFail, quietPass []time.Duration
		var quietWrite time.Duration
		if flips > 0 {
			quietPods := createScalePods(ctx, b, c, ns, quietNode, flips, func(int) map[string]string { return map[string]string{"app": "quiet"} })
			if err := c.Create(ctx, resource(ns, "quiet", scalePorts, scaleModes()[0].probes...)); err != nil {
				b.Fatal(err)
			}
			a := startScaleAgent(b, quietNode)
			a.settle(ctx, b, ns, quietNode, flips*3, flips*3)
			time.Sleep(warmUp)
			victims := make([]flipVictim, len(quietPods))
			for i, p := range quietPods {
				victims[i] = flipVictim{pod: p.name, addr: net.JoinHostPort(p.ip, strconv.Itoa(scaleWebPort)), resource: "quiet", pods: flips}
			}
			before := a.scrape(b)
			quietFail, quietPass = flipTrials(ctx, b, ns, srv, victims, gap)
			quietWrite = a.scrape(b).meanWriteDelay(before)
			a.stop()
		}

		// The load: apps of 100 pods on one node; the first pgPods pods
		// also answer PostgreSQL.
		appOf := func(i int) string { return fmt.Sprintf("app-%02d", i/scalePodsPerApp) }
		setupStart := time.Now()
		loadPods := createScalePods(ctx, b, c, ns, loadNode, pods, func(i int) map[string]string {
			l := map[string]string{"app": appOf(i)}
			if i < pgPods {
				l["db"] = "yes"
			}
			return l
		})
		appPods := map[string]int{}
		for i := range loadPods {
			appPods[appOf(i)]++
		}
		apps := make([]string, 0, len(appPods))
		for app := range appPods {
			apps = append(apps, app)
		}
		slices.Sort(apps)
		for _, app := range apps {
			if err := c.Create(ctx, resource(ns, app, scalePorts, scaleModes()[0].probes...)); err != nil {
				b.Fatal(err)
			}
		}
		fmt.Printf("  %d pods and %d resources created in %v\n", pods, len(apps), time.Since(setupStart).Round(time.Second))
		fmt.Printf("  %-11s %-33s %5s %7s %9s %6s %6s %8s %7s %8s  %s\n", "load", "probes per pod", "pods", "targets", "probes/s", "failed", "cores", "µs/probe", "RSS MiB", "peak MiB", "backend cores")

		var loadFail, loadPass []time.Duration
		var loadWrite time.Duration
		var loadRate float64
		for _, mode := range modes {
			targets, endpoints := pods*3, pods*len(scalePorts)
			backendCPU := func() float64 { return processCPU(b, os.Getpid(), false) }
			backend := "this test process"
			if mode.pg {
				if pgPods == 0 {
					fmt.Printf("  %-11s skipped (SWH_BENCH_SCALE_PG_PODS=0)\n", mode.name)
					continue
				}
				pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{Addr: "0.0.0.0", Port: scalePGPort, MaxConnections: 100})
				if errors.Is(err, harness.ErrMissingDependency) {
					fmt.Printf("  %-11s skipped: %v\n", mode.name, err)
					continue
				}
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					if b.Failed() {
						lines := strings.Split(strings.TrimSpace(pg.Log()), "\n")
						fmt.Printf("the end of the PostgreSQL log:\n%s\n", strings.Join(lines[max(0, len(lines)-30):], "\n"))
					}
					_ = pg.Close()
				})
				postmaster := postmasterPID(b, pg)
				backendCPU = func() float64 { return processCPU(b, postmaster, true) }
				backend = "postmaster and its backends"
				if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"},
					StringData: map[string]string{"user": pg.Options().User, "password": pg.Options().Password}}); err != nil {
					b.Fatal(err)
				}
				db := resource(ns, "db", []swhv1alpha1.ServicePort{{Name: "postgres", Port: 5432, TargetPort: intstr.FromString("postgres")}},
					postgresProbe("SELECT 1", "db-credentials"),
					postgresProbe("SELECT NOT pg_is_in_recovery()", "db-credentials"),
					postgresProbe("SELECT count(*) < current_setting('max_connections')::int * 0.9 FROM pg_stat_activity", "db-credentials"))
				db.Spec.Selector = map[string]string{"db": "yes"}
				if err := c.Create(ctx, db); err != nil {
					b.Fatal(err)
				}
				targets, endpoints = pgPods*3, pods*len(scalePorts)+pgPods
			}
			for _, app := range apps {
				setAppProbes(ctx, b, c, ns, app, mode.probes)
			}
			a := startScaleAgent(b, loadNode)
			a.settle(ctx, b, ns, loadNode, targets, endpoints)
			time.Sleep(warmUp)
			f := a.measure(b, window, backendCPU)
			f.pods = pods
			if mode.pg {
				f.pods = pgPods
			}
			fmt.Printf("  %-11s %-33s %5d %7d %9.1f %6.0f %6.3f %8.1f %7.1f %8.1f  %.3f (%s)\n",
				mode.name, mode.shape, f.pods, f.targets, f.probesPerSec, f.failures, f.cores, f.usPerProbe(), float64(f.rssKiB)/1024, float64(f.peakKiB)/1024, f.backendCores, backend)
			b.ReportMetric(f.usPerProbe(), "us/probe-"+mode.name)
			if mode.name == "mixed" {
				b.ReportMetric(f.cores, "cores-mixed")
				b.ReportMetric(float64(f.rssKiB)/1024, "MiB-RSS-mixed")
				b.ReportMetric(f.probesPerSec, "probes/s-mixed")
				if flips > 0 {
					victims := make([]flipVictim, flips)
					for k := range victims {
						i := k * pods / flips
						victims[k] = flipVictim{pod: loadPods[i].name, addr: net.JoinHostPort(loadPods[i].ip, strconv.Itoa(scaleWebPort)), resource: appOf(i), pods: appPods[appOf(i)]}
					}
					before := a.scrape(b)
					loadFail, loadPass = flipTrials(ctx, b, ns, srv, victims, gap)
					loadWrite = a.scrape(b).meanWriteDelay(before)
					loadRate = f.probesPerSec
				}
			}
			a.stop()
		}

		if flips > 0 {
			fmt.Printf("  verdict -> slice change seen by a watch (from the backend's first answer that flips the verdict, thresholds 1, to the watch event), %d pods' web port flipped to failing and back one at a time, %v apart:\n", flips, gap)
			fmt.Printf("    %-40s %-36s %-36s %s\n", "", "to failing", "to passing", "agent's verdict->write (mean)")
			fmt.Printf("    %-40s %-36s %-36s %v\n", fmt.Sprintf("without load (%d pods on the node)", flips), durationQuantiles(quietFail), durationQuantiles(quietPass), quietWrite.Round(100*time.Microsecond))
			b.ReportMetric(p99ms(append(quietFail, quietPass...)), "ms-p99-verdict-to-watch-quiet")
			if loadFail != nil {
				fmt.Printf("    %-40s %-36s %-36s %v\n", fmt.Sprintf("under the mixed load (%.0f probes/s)", loadRate), durationQuantiles(loadFail), durationQuantiles(loadPass), loadWrite.Round(100*time.Microsecond))
				b.ReportMetric(p99ms(append(loadFail, loadPass...)), "ms-p99-verdict-to-watch-load")
			}
		}
		fmt.Printf("  load average %s; the benchmark took %v\n", harness.LoadAverage(), time.Since(started).Round(time.Second))
	}
}

// scaleFigures are one load's measurements.
type scaleFigures struct {
	pods, targets       int
	probesPerSec        float64
	failures            float64
	cores, backendCores float64
	peakKiB, rssKiB     int
}

func (f scaleFigures) usPerProbe() float64 {
	if f.probesPerSec == 0 {
		return 0
	}
	return f.cores * 1e6 / f.probesPerSec
}

func p99ms(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, len(s)*99/100)].Microseconds()) / 1000
}

// scalePod is a pod of the benchmark.
type scalePod struct{ name, ip string }

// createScalePods creates n pods on node with the benchmark's ports, each
// with an address of its own, 32 at a time.
func createScalePods(ctx context.Context, b *testing.B, c client.Client, ns, node string, n int, labels func(int) map[string]string) []scalePod {
	ips := harness.PodIPs(b, n)
	out := make([]scalePod, n)
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				out[i] = scalePod{name: fmt.Sprintf("%s-%04d", node, i), ip: ips[i]}
				if _, err := harness.CreatePod(ctx, c, harness.PodOptions{
					Namespace: ns, Name: out[i].name, Node: node, Labels: labels(i), IPs: []string{ips[i]},
					Ports: []corev1.ContainerPort{
						{Name: "web", ContainerPort: scaleWebPort}, {Name: "admin", ContainerPort: scaleAdminPort},
						{Name: "metrics", ContainerPort: scaleMetricsPort}, {Name: "postgres", ContainerPort: scalePGPort},
					},
				}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return out
}

// setAppProbes replaces the probes of an app; nil removes its healthcheck.
func setAppProbes(ctx context.Context, b *testing.B, c client.Client, ns, name string, probes []swhv1alpha1.Probe) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swh); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(swh.DeepCopy())
	if probes == nil {
		swh.Spec.Healthcheck = nil
	} else {
		swh.Spec.Healthcheck = &swhv1alpha1.Healthcheck{PeriodSeconds: 1, Probes: probes}
	}
	if err := c.Patch(ctx, swh, patch); err != nil {
		b.Fatal(err)
	}
}

// scaleAgent is bin/swh-agent with its /metrics on a loopback port.
type scaleAgent struct {
	*agentProcess
	metricsURL string
}

func startScaleAgent(b *testing.B, node string) *scaleAgent {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return &scaleAgent{agentProcess: startAgentProcess(b, node, "--metrics-bind-address="+addr), metricsURL: "http://" + addr + "/metrics"}
}

// agentCounters are the agent's metrics the benchmark reads.
type agentCounters struct {
	probes, failures, targets float64
	writeDelaySum             float64
	writeDelayCount           float64
	// failed counts failures by their labels (mode and reason).
	failed map[string]float64
}

// meanWriteDelay is the mean of the agent's verdict-to-write histogram
// since before.
func (m agentCounters) meanWriteDelay(before agentCounters) time.Duration {
	n := m.writeDelayCount - before.writeDelayCount
	if n == 0 {
		return 0
	}
	return time.Duration((m.writeDelaySum - before.writeDelaySum) / n * float64(time.Second))
}

func (a *scaleAgent) scrape(b *testing.B) agentCounters {
	m, err := a.tryScrape()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func (a *scaleAgent) tryScrape() (agentCounters, error) {
	var m agentCounters
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(a.metricsURL)
	if err != nil {
		return m, fmt.Errorf("scraping the agent: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "swh_agent_probe_results_total":
			m.probes += v
			if strings.Contains(line, `status="failure"`) && v > 0 {
				m.failures += v
				if m.failed == nil {
					m.failed = map[string]float64{}
				}
				m.failed[line[strings.Index(line, "{"):strings.LastIndex(line, "}")+1]] += v
			}
		case "swh_agent_targets":
			m.targets = v
		case "swh_agent_verdict_to_write_seconds_sum":
			m.writeDelaySum = v
		case "swh_agent_verdict_to_write_seconds_count":
			m.writeDelayCount = v
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	return m, nil
}

// settle waits until the agent runs targets probe jobs, has probed each
// about twice, and node's slices in ns hold endpoints endpoints, all ready.
func (a *scaleAgent) settle(ctx context.Context, b *testing.B, ns, node string, targets, endpoints int) {
	harness.Eventually(b, 3*time.Minute, fmt.Sprintf("%d probe targets probed twice and %d endpoints ready", targets, endpoints), func() error {
		m, err := a.tryScrape()
		if err != nil {
			return err
		}
		if int(m.targets) != targets || m.probes < 2*float64(targets) {
			return fmt.Errorf("%v targets, %v probes so far", m.targets, m.probes)
		}
		list := &discoveryv1.EndpointSliceList{}
		if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		ready := 0
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				if ep.NodeName != nil && *ep.NodeName == node && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					ready++
				}
			}
		}
		if ready != endpoints {
			return fmt.Errorf("%d of %d endpoints ready; failed probes so far: %v", ready, endpoints, m.failed)
		}
		return nil
	})
}

// measure reads the agent's probes, CPU and memory, and the backends' CPU,
// over window.
func (a *scaleAgent) measure(b *testing.B, window time.Duration, backendCPU func() float64) scaleFigures {
	m0, cpu0, bk0, t0 := a.scrape(b), a.cpuSeconds(b), backendCPU(), time.Now()
	time.Sleep(window)
	m1, cpu1, bk1 := a.scrape(b), a.cpuSeconds(b), backendCPU()
	elapsed := time.Since(t0).Seconds()
	f := scaleFigures{
		targets:      int(m1.targets),
		probesPerSec: (m1.probes - m0.probes) / elapsed,
		failures:     m1.failures - m0.failures,
		cores:        (cpu1 - cpu0) / elapsed,
		backendCores: (bk1 - bk0) / elapsed,
	}
	f.peakKiB, f.rssKiB = a.memoryKiB(b)
	return f
}

// processCPU is a process's user+system CPU time in seconds, with that of
// its waited-for children when children is set.
func processCPU(b *testing.B, pid int, children bool) float64 {
	v, err := harness.ProcessCPU(pid, children)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// postmasterPID reads the server's PID from its data folder.
func postmasterPID(b *testing.B, pg *harness.Postgres) int {
	data, err := os.ReadFile(filepath.Join(pg.Dir(), "data", "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		b.Fatalf("postmaster.pid: %v", err)
	}
	return pid
}

// podHTTP answers HTTP on ports of every pod address (one listener per port
// on 0.0.0.0), failing with 503 on the addresses ("ip:port") set failing,
// and records, as harness.HTTPServer.FirstServed does, when an address's
// first answer after its last change was written.
type podHTTP struct {
	mu      sync.Mutex
	failing map[string]bool
	gen     map[string]int64
	first   map[string]time.Time
}

func startPodHTTP(b *testing.B, ports ...int) *podHTTP {
	s := &podHTTP{failing: map[string]bool{}, gen: map[string]int64{}, first: map[string]time.Time{}}
	for _, port := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		if err != nil {
			b.Fatalf("listening on every pod address: %v", err)
		}
		srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
		go func() { _ = srv.Serve(l) }()
		b.Cleanup(func() { _ = srv.Close() })
	}
	return s
}

// setFailing makes addr answer 503 (or 200 again) from now on.
func (s *podHTTP) setFailing(addr string, failing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[addr] = failing
	s.gen[addr]++
	delete(s.first, addr)
}

// firstServed returns when addr's first answer since its last change was
// written; the zero time if none was yet.
func (s *podHTTP) firstServed(addr string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first[addr]
}

func (s *podHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	addr := ""
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		addr = a.String()
	}
	s.mu.Lock()
	failing, gen := s.failing[addr], s.gen[addr]
	s.mu.Unlock()
	code := http.StatusOK
	if failing {
		code = http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "%s answered %d\n", addr, code)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if gen == 0 {
		return // never changed: nothing to time
	}
	s.mu.Lock()
	if _, seen := s.first[addr]; !seen && s.gen[addr] == gen {
		s.first[addr] = time.Now()
	}
	s.mu.Unlock()
}

// flipVictim is a pod whose web backend a trial flips.
type flipVictim struct {
	pod, addr, resource string
	// pods is how many pods the resource has on the node.
	pods int
}

// flipTrials fails then restores the web backend of each victim in turn,
// gap apart, and returns the delays from the backend's first answer after
// each change (the probe result that flips the verdict) to the slice
// change seen by a watch.
func flipTrials(ctx context.Context, b *testing.B, ns string, srv *podHTTP, victims []flipVictim, gap time.Duration) (toFail, toPass []time.Duration) {
	for i, v := range victims {
		w := watchReady(ctx, b, ns, v.resource)
		for _, failing := range []bool{true, false} {
			srv.setFailing(v.addr, failing)
			t1 := w.untilPort(b, "web", func(m map[string]bool) bool {
				if failing {
					return !m[v.pod] && len(m) == v.pods-1
				}
				return m[v.pod] && len(m) == v.pods
			})
			tv := srv.firstServed(v.addr)
			if tv.IsZero() || tv.After(t1) {
				b.Fatalf("trial %d (%s failing %v): the backend's first answer (%v) is not before the slice change (%v)", i, v.pod, failing, tv, t1)
			}
			if failing {
				toFail = append(toFail, t1.Sub(tv))
			} else {
				toPass = append(toPass, t1.Sub(tv))
			}
		}
		w.stop()
		time.Sleep(gap)
	}
	return toFail, toPass
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a duration such as 15s", name, v)
	}
	return d
}
