// Command peers measures the probes library side by side with kubelet's
// probers and raw standard-library baselines, in one run, and prints each
// figure with the ratios (make bench-probes):
//
//   - TCP: probes.TCPProber, a raw net.Dialer connect-and-close loop and
//     kubelet's k8s.io/kubernetes/pkg/probe/tcp;
//   - HTTP: probes.HTTPProber, a raw http.Client without keep-alive and
//     kubelet's pkg/probe/http;
//   - scheduler: 10,000 TCP targets at a 1 s period through probes.Scheduler,
//     the same with kubelet's TCP prober under our scheduler, and the same
//     load run the way kubelet's prober workers run it.
//
// Per probe it reports wall time, heap allocations, CPU time (getrusage) and
// the TIME_WAIT sockets left on the prober's side; for the scheduler, probes
// per second, CPU cores, scheduling lag and false failures. The servers run in
// a child process on 127.0.0.1 (and nowhere else), so the CPU figures are the
// probers'. Speed is measured here, never asserted in tests: the machines are
// shared and noisy, so compare the ratios of one run, not figures across runs.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	kubetcp "k8s.io/kubernetes/pkg/probe/tcp"

	"github.com/swh-dev/swh/probes"
)

type options struct {
	rounds    int
	tcpOps    int
	httpOps   int
	sched     SchedConfig
	kubeSched bool
	only      string
	deadline  time.Duration
	withGoals bool
}

func main() {
	if serveChild() {
		return
	}
	var o options
	flag.IntVar(&o.rounds, "rounds", 7, "interleaved rounds of each TCP and HTTP comparison (medians are reported)")
	flag.IntVar(&o.tcpOps, "tcp-ops", 4000, "TCP probes per variant and round")
	flag.IntVar(&o.httpOps, "http-ops", 1500, "HTTP probes per variant and round")
	flag.IntVar(&o.sched.Targets, "targets", 10000, "scheduler: TCP targets")
	flag.IntVar(&o.sched.Listeners, "listeners", 10000, "scheduler: listening ports on 127.0.0.1 the targets spread over")
	flag.DurationVar(&o.sched.Period, "period", time.Second, "scheduler: period of every target")
	flag.DurationVar(&o.sched.Warmup, "warmup", 2*time.Second, "scheduler: unmeasured start (the first, jittered round)")
	flag.DurationVar(&o.sched.Duration, "duration", 15*time.Second, "scheduler: measured window")
	flag.BoolVar(&o.kubeSched, "kubelet-scheduler", true, "scheduler: also run the load with kubelet's prober, through our scheduler and the way kubelet's workers do")
	flag.StringVar(&o.only, "only", "tcp,http,scheduler", "comparisons to run, comma-separated")
	flag.DurationVar(&o.deadline, "deadline", 10*time.Minute, "give up (exit 2) after this long")
	flag.Parse()
	o.withGoals = true

	// Everything is bounded in count; this bounds it in time too.
	watchdog := time.AfterFunc(o.deadline, func() {
		fmt.Fprintf(os.Stderr, "peers: still running after %v; giving up\n", o.deadline)
		os.Exit(2)
	})
	defer watchdog.Stop()
	if err := run(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, o options) error {
	want := map[string]bool{}
	for _, s := range strings.Split(o.only, ",") {
		want[strings.TrimSpace(s)] = true
	}
	fmt.Fprintf(w, "Probers side by side: %s %s/%s, %d CPUs, GOMAXPROCS %d; servers in a child process on 127.0.0.1.\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintln(w, "CPU is getrusage of this process (user+sys); on loopback the sys part includes kernel work for the server's side of the packets.")
	fmt.Fprintln(w, "Other work on the machine skews the figures (see the load averages before each part): compare the ratios of one run.")
	if want["tcp"] {
		fmt.Fprintf(w, "\nLoad average before TCP: %s\n", loadAverage())
		c, err := compare("TCP: connect and close", "tcp", tcpVariants(), o.rounds, o.tcpOps)
		if err != nil {
			return fmt.Errorf("TCP: %w", err)
		}
		printComparison(w, c)
		if o.withGoals {
			ours, floor, kube := c.Row("ours"), c.Row("raw"), c.Row("kubelet").Median
			goal(w, "within 1.2x of the raw floor, "+floor.Name+" (ns/op and CPU/op)", within(ours.Median, floor.Median, 1.2))
			goal(w, "cheaper than kubelet's (CPU/op and allocs/op)", ours.Median.CPUUsPerOp() < kube.CPUUsPerOp() && ours.Median.AllocsPerOp < kube.AllocsPerOp)
		}
	}
	if want["http"] {
		fmt.Fprintf(w, "\nLoad average before HTTP: %s\n", loadAverage())
		c, err := compare("HTTP: GET /healthz, no keep-alive", "http", httpVariants(), o.rounds, o.httpOps)
		if err != nil {
			return fmt.Errorf("HTTP: %w", err)
		}
		printComparison(w, c)
		if o.withGoals {
			ours, floor := c.Row("ours"), c.Row("raw")
			goal(w, "within 1.2x of the raw floor, "+floor.Name+" (ns/op and CPU/op)", within(ours.Median, floor.Median, 1.2))
		}
	}
	if want["scheduler"] {
		fmt.Fprintf(w, "\nLoad average before the scheduler: %s\n", loadAverage())
		tcp, err := probes.NewTCP(probes.TCPConfig{})
		if err != nil {
			return err
		}
		r, err := runScheduler(o.sched, "swh probes.Scheduler + TCPProber", tcp)
		if err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		rows := []*SchedRow{r}
		if o.kubeSched {
			h, err := runScheduler(o.sched, "swh probes.Scheduler + kubelet pkg/probe/tcp", kubeletTCP{kubetcp.New()})
			if err != nil {
				return fmt.Errorf("scheduler with kubelet's prober: %w", err)
			}
			k, err := runKubeletStyle(o.sched)
			if err != nil {
				return fmt.Errorf("kubelet-style scheduler: %w", err)
			}
			rows = append(rows, h, k)
		}
		printScheduler(w, o.sched, rows)
		if o.withGoals {
			expected := float64(o.sched.Targets) / o.sched.Period.Seconds()
			goal(w, fmt.Sprintf("%.0f probes/s (within 1%%)", expected), r.ProbesPerSec >= 0.99*expected)
			goal(w, "within half a core", r.Cores <= 0.5)
			goal(w, "scheduling lag p99 under 50ms", r.LagP99 < 50*time.Millisecond)
			goal(w, "zero false failures", r.FalseFailures() == 0)
		}
	}
	return nil
}

func printComparison(w io.Writer, c *Comparison) {
	fmt.Fprintf(w, "%s: %d interleaved rounds of %d probes per variant, medians of the rounds\n", c.Title, c.Rounds, c.OpsPer)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tns/op\tallocs/op\tB/op\tCPU µs/op\tuser\tsys\tTIME_WAIT left\tfailures\t")
	for _, r := range c.Rows {
		m := r.Median
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t\n",
			r.Name, m.NsPerOp, m.AllocsPerOp, m.BytesPerOp, m.CPUUsPerOp(), m.UserUsPerOp, m.SysUsPerOp, r.TimeWait, m.Failures)
	}
	ours := c.Row("ours").Median
	for _, base := range c.Rows {
		if base.Role == "ours" {
			continue
		}
		b := base.Median
		fmt.Fprintf(tw, "ours / %s\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n", base.Name,
			x(ours.NsPerOp, b.NsPerOp), x(ours.AllocsPerOp, b.AllocsPerOp), x(ours.BytesPerOp, b.BytesPerOp),
			x(ours.CPUUsPerOp(), b.CPUUsPerOp()), x(ours.UserUsPerOp, b.UserUsPerOp), x(ours.SysUsPerOp, b.SysUsPerOp))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "(TIME_WAIT left: the prober's sockets to the variant's server in TIME_WAIT after its %d connections, bounded by net.ipv4.tcp_max_tw_buckets)\n", c.Rows[0].Ops)
}

func printScheduler(w io.Writer, cfg SchedConfig, rows []*SchedRow) {
	fmt.Fprintf(w, "Scheduler: %d TCP targets on %d ports of 127.0.0.1, period %v, measured for %v after %v of warm-up\n",
		cfg.Targets, cfg.Listeners, cfg.Period, cfg.Duration, cfg.Warmup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tprobes/s\tcores\tlag p50\tlag p99\tlag max\tprobe p50\tprobe p99\tfalse failures\tTIME_WAIT run+shutdown\tpeak goroutines\tpeak threads\tserver cores\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%s\t%s\t%s\t%s\t%s\t%s\t%d+%d\t%d\t%d\t%.3f\t\n", r.Name, r.ProbesPerSec, r.Cores,
			dur(r.LagP50), dur(r.LagP99), dur(r.LagMax), dur(r.ProbeP50), dur(r.ProbeP99), r.FailureSummary(), r.TimeWait, r.TimeWaitShutdown, r.Goroutines, r.Threads, r.ServerCores)
	}
	for _, b := range rows[1:] {
		a := rows[0]
		fmt.Fprintf(tw, "ours / %s\t%s\t%s\t%s\t%s\t\t%s\t%s\t\t\t%s\t%s\t\t\n", shortName(b.Name), x(a.ProbesPerSec, b.ProbesPerSec), x(a.Cores, b.Cores),
			x(float64(a.LagP50), float64(b.LagP50)), x(float64(a.LagP99), float64(b.LagP99)),
			x(float64(a.ProbeP50), float64(b.ProbeP50)), x(float64(a.ProbeP99), float64(b.ProbeP99)), x(float64(a.Goroutines), float64(b.Goroutines)), x(float64(a.Threads), float64(b.Threads)))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "(lag: Report.Started - Report.Scheduled, or for kubelet-style the ticker's time to the probe's start; probe: the probe's own duration;")
	fmt.Fprintln(w, " cores: CPU time / wall time; TIME_WAIT: the prober's sockets to the listeners in TIME_WAIT at the end of the window (warm-up")
	fmt.Fprintln(w, " included), + those the shutdown added (Go's dialer closes a connection whose connect was canceled with a FIN, not a reset);")
	fmt.Fprintln(w, " kubelet-style is one goroutine and ticker per target, as kubelet's prober workers, without their result and status managers)")
}

// loadAverage returns the 1, 5 and 15 minute load averages of the machine.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// shortName names a scheduler run in a ratio line.
func shortName(name string) string {
	if strings.HasPrefix(name, "kubelet-style") {
		return "kubelet-style"
	}
	return "our scheduler + kubelet's prober"
}

func goal(w io.Writer, what string, met bool) {
	verdict := "met"
	if !met {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "goal: %s: %s\n", what, verdict)
}

// within reports whether ours costs at most limit times base, in wall time
// and in CPU time per probe.
func within(ours, base sample, limit float64) bool {
	return ours.NsPerOp <= limit*base.NsPerOp && ours.CPUUsPerOp() <= limit*base.CPUUsPerOp()
}

func x(a, b float64) string {
	if b == 0 {
		return "-"
	}
	if r := a / b; r < 0.1 {
		return fmt.Sprintf("%.2gx", r)
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
}
