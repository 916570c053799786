package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kubetcp "k8s.io/kubernetes/pkg/probe/tcp"

	"github.com/swh-dev/swh/probes"
)

// SchedConfig is one scheduler load.
type SchedConfig struct {
	Kind      string        // the servers: "tcp" (also for "") or "grpc" (grpc-go's health service)
	Targets   int           // probed keys
	Listeners int           // servers they spread over (each on its own port)
	Period    time.Duration // of every key
	Warmup    time.Duration // not measured: the first, jittered round
	Duration  time.Duration // measured
	Placement Placement     // where the servers listen
	// Profile, if set, receives a CPU profile (pprof) of the prober over
	// the measured window.
	Profile io.Writer
}

func (c SchedConfig) kind() string {
	if c.Kind == "" {
		return "tcp"
	}
	return c.Kind
}

// title names c's load in a title: "Scheduler" or "gRPC scheduler".
func (c SchedConfig) title() string {
	if c.kind() == "grpc" {
		return "gRPC scheduler"
	}
	return "Scheduler"
}

// label names the targets of c in a title: "TCP" or "gRPC".
func (c SchedConfig) label() string {
	if c.kind() == "grpc" {
		return "gRPC"
	}
	return "TCP"
}

// SchedRow is what one way of running the load achieved over the measured
// window.
type SchedRow struct {
	Name         string
	Placement    Placement
	Probes       int     // results delivered in the window
	ProbesPerSec float64 // Probes / window
	Cores        float64 // CPU time of the prober process / window
	UserCores    float64 // the user-space part of Cores
	ServerCores  float64 // CPU time of the server process / window (not the prober's)
	// SoftirqCores is the time the whole machine spent in softirq handlers
	// / window (/proc/stat): other processes' included, and, without
	// CONFIG_IRQ_TIME_ACCOUNTING, charged to the tasks they interrupted.
	SoftirqCores   float64
	LagP50, LagP99 time.Duration
	LagMax         time.Duration
	// ProbeP50 and ProbeP99 are the probes' own durations (connect and close;
	// for gRPC, connect, call and close).
	ProbeP50, ProbeP99 time.Duration
	Failures           map[string]int // reason -> count; every server is up, so all are false failures
	TimeWait           int            // prober-side TIME_WAIT sockets at the end of the window, before shutdown
	// TimeWaitShutdown is how many more the shutdown left: probes still
	// connecting when it canceled them.
	TimeWaitShutdown int
	Goroutines       int // peak sampled during the window
	Threads          int // peak OS threads of the process, sampled during the window
}

// CPUPerProbe is the prober's CPU time per probe delivered.
func (r SchedRow) CPUPerProbe() time.Duration {
	if r.ProbesPerSec == 0 {
		return 0
	}
	return time.Duration(r.Cores / r.ProbesPerSec * float64(time.Second))
}

func (r SchedRow) FalseFailures() int {
	n := 0
	for _, c := range r.Failures {
		n += c
	}
	return n
}

func (r SchedRow) FailureSummary() string {
	if len(r.Failures) == 0 {
		return "0"
	}
	parts := make([]string, 0, len(r.Failures))
	for reason, n := range r.Failures {
		parts = append(parts, fmt.Sprintf("%d %s", n, reason))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", r.FalseFailures(), strings.Join(parts, ", "))
}

// recorder collects the results of the measured window.
type recorder struct {
	measuring atomic.Bool
	mu        sync.Mutex
	lags      []time.Duration
	latencies []time.Duration
	failures  map[string]int
}

func newRecorder(capacity int) *recorder {
	return &recorder{lags: make([]time.Duration, 0, capacity), latencies: make([]time.Duration, 0, capacity), failures: map[string]int{}}
}

func (r *recorder) record(lag, latency time.Duration, failure string) {
	if !r.measuring.Load() {
		return
	}
	r.mu.Lock()
	r.lags = append(r.lags, lag)
	r.latencies = append(r.latencies, latency)
	if failure != "" {
		r.failures[failure]++
	}
	r.mu.Unlock()
}

// runLoad starts the servers, lets start(ctx) run the load through the warm-up
// and the measured window, and returns the figures.
func runLoad(name string, cfg SchedConfig, start func(ctx context.Context, targets []probes.Target, rec *recorder) (wait func(), err error)) (*SchedRow, error) {
	srv, err := startChild(cfg.kind(), cfg.Listeners, cfg.Placement)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	servers := map[netip.AddrPort]bool{}
	targets := make([]probes.Target, cfg.Targets)
	for i := range targets {
		ap, err := netip.ParseAddrPort(srv.Addrs[i%len(srv.Addrs)])
		if err != nil {
			return nil, err
		}
		servers[ap] = true
		targets[i] = probes.TargetFrom(ap)
	}
	perSec := float64(cfg.Targets) / cfg.Period.Seconds()
	rec := newRecorder(int(perSec*cfg.Duration.Seconds()*1.1) + 16)

	before := timeWaits()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait, err := start(ctx, targets, rec)
	if err != nil {
		return nil, err
	}
	time.Sleep(cfg.Warmup)

	srvCPU0, err := srv.CPU()
	if err != nil {
		return nil, err
	}
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return nil, err
		}
	}
	soft0 := softirqTicks()
	u0, s0 := cpuTime()
	t0 := time.Now()
	rec.measuring.Store(true)
	peak, peakThreads := 0, 0
	for end := t0.Add(cfg.Duration); time.Now().Before(end); {
		time.Sleep(min(100*time.Millisecond, time.Until(end)))
		peak = max(peak, runtime.NumGoroutine())
		peakThreads = max(peakThreads, threads())
	}
	rec.measuring.Store(false)
	elapsed := time.Since(t0)
	u1, s1 := cpuTime()
	soft1 := softirqTicks()
	if cfg.Profile != nil {
		pprof.StopCPUProfile()
	}
	srvCPU1, err := srv.CPU()
	if err != nil {
		return nil, err
	}
	// The load goes on while /proc/net/tcp is read (the window is over: no
	// result is recorded), so any TIME_WAIT socket meanwhile is the run's.
	tw := newTimeWaits(before, servers)
	// Reading it holds a core for a moment, and probes pile up: let them
	// drain before stopping, so that the shutdown is a typical one.
	time.Sleep(min(2*cfg.Period, 5*time.Second))
	cancel()
	wait()
	twShutdown := newTimeWaits(before, servers) - tw

	rec.mu.Lock()
	defer rec.mu.Unlock()
	lags := rec.lags
	slices.Sort(lags)
	row := &SchedRow{
		Name:             name,
		Placement:        cfg.Placement,
		Probes:           len(lags),
		ProbesPerSec:     float64(len(lags)) / elapsed.Seconds(),
		Cores:            (u1 - u0 + s1 - s0).Seconds() / elapsed.Seconds(),
		UserCores:        (u1 - u0).Seconds() / elapsed.Seconds(),
		ServerCores:      (srvCPU1 - srvCPU0).Seconds() / elapsed.Seconds(),
		SoftirqCores:     (soft1 - soft0).Seconds() / elapsed.Seconds(),
		LagP50:           percentile(lags, 0.50),
		LagP99:           percentile(lags, 0.99),
		Failures:         rec.failures,
		TimeWait:         tw,
		TimeWaitShutdown: twShutdown,
		Goroutines:       peak,
		Threads:          peakThreads,
	}
	if len(lags) > 0 {
		row.LagMax = lags[len(lags)-1]
	}
	slices.Sort(rec.latencies)
	row.ProbeP50, row.ProbeP99 = percentile(rec.latencies, 0.5), percentile(rec.latencies, 0.99)
	return row, nil
}

// runScheduler is the load through probes.Scheduler with default options
// (jitter on, MaxConcurrent 1024), probing with prober.
func runScheduler(cfg SchedConfig, name string, prober probes.Prober) (*SchedRow, error) {
	return runLoad(name, cfg, func(ctx context.Context, targets []probes.Target, rec *recorder) (func(), error) {
		s, err := probes.NewScheduler(probes.SchedulerOptions[int]{OnResult: func(r probes.Report[int]) {
			failure := ""
			if !r.Result.Passed() {
				failure = string(r.Result.Reason)
			}
			rec.record(r.Started.Sub(r.Scheduled), r.Result.Latency, failure)
		}})
		if err != nil {
			return nil, err
		}
		for i, t := range targets {
			if err := s.Add(i, probes.Job{Prober: prober, Target: t, Period: cfg.Period, Timeout: probeTimeout}); err != nil {
				return nil, err
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = s.Run(ctx)
		}()
		return func() { <-done }, nil
	})
}

// kubeletTCP adapts kubelet's TCP prober to probes.Prober, so that our
// scheduler can drive it: that tells the prober's cost from the scheduler's.
// kubelet's prober takes a timeout, not a context: cancellation is lost.
type kubeletTCP struct{ p kubetcp.Prober }

func (k kubeletTCP) Probe(ctx context.Context, t probes.Target) probes.Result {
	timeout := probeTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	start := time.Now()
	res, out, err := k.p.Probe(t.Host, t.Port, timeout)
	r := probes.Result{Status: probes.Success, Reason: probes.ReasonOK, Message: "connected", Latency: time.Since(start)}
	if err := kubeResultErr(res, out, err); err != nil {
		r.Status, r.Reason, r.Message, r.Err = probes.Failure, probes.Reason(kubeReason(out)), err.Error(), err
	}
	return r
}

// runKubeletStyle is the same load the way kubelet's prober workers run it
// (pkg/kubelet/prober/worker.go): one goroutine per target, a random initial
// sleep within the period, then a time.Ticker, calling kubelet's TCP prober.
// It leaves out everything else a kubelet worker does per probe (results
// and status managers, metrics), so it flatters kubelet.
func runKubeletStyle(cfg SchedConfig) (*SchedRow, error) {
	return runLoad("kubelet-style workers + pkg/probe/tcp", cfg, func(ctx context.Context, targets []probes.Target, rec *recorder) (func(), error) {
		prober := kubetcp.New()
		var wg sync.WaitGroup
		for _, t := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				jitter := time.NewTimer(rand.N(cfg.Period))
				defer jitter.Stop()
				var due time.Time
				select {
				case <-ctx.Done():
					return
				case due = <-jitter.C:
				}
				ticker := time.NewTicker(cfg.Period)
				defer ticker.Stop()
				for {
					started := time.Now()
					res, out, err := prober.Probe(t.Host, t.Port, probeTimeout)
					failure := ""
					if err := kubeResultErr(res, out, err); err != nil {
						failure = kubeReason(out)
					}
					if ctx.Err() != nil {
						return
					}
					rec.record(started.Sub(due), time.Since(started), failure)
					select {
					case <-ctx.Done():
						return
					case due = <-ticker.C:
					}
				}
			}()
		}
		return wg.Wait, nil
	})
}

// kubeReason condenses a kubelet probe's output to a reason-like word.
func kubeReason(out string) string {
	switch {
	case strings.Contains(out, "refused"):
		return "refused"
	case strings.Contains(out, "timeout"):
		return "timeout"
	case strings.Contains(out, "address not available"), strings.Contains(out, "cannot assign"):
		return "no-ephemeral-port"
	}
	return "error"
}

// threads returns the number of OS threads of this process (0 if unknown).
func threads() int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
