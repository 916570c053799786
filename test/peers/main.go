// Command peers measures the probes library side by side with kubelet's
// probers and raw baselines (the standard library's; grpc-go's for gRPC), in
// one run, and prints each figure with the ratios (make bench-probes):
//
//   - TCP: probes.TCPProber, a raw net.Dialer connect-and-close loop and
//     kubelet's k8s.io/kubernetes/pkg/probe/tcp;
//   - HTTP: probes.HTTPProber, a raw http.Client without keep-alive and
//     kubelet's pkg/probe/http;
//   - gRPC (grpc): grpchealth.Prober, a raw grpc-go client (grpc.NewClient,
//     Health/Check, Close) and kubelet's pkg/probe/grpc, each calling
//     grpc.health.v1.Health/Check on a connection of its own per probe,
//     against grpc-go's health server;
//   - scheduler: 10,000 TCP targets at a 1 s period through probes.Scheduler,
//     the same with kubelet's TCP prober under our scheduler, and the same
//     load run the way kubelet's prober workers run it;
//   - gRPC scheduler (grpc-scheduler): 1,000 gRPC targets at a 1 s period
//     through probes.Scheduler with grpchealth.Prober, and the same with
//     kubelet's gRPC prober under our scheduler.
//
// -only picks some of them (-only grpc,grpc-scheduler: the gRPC ones). Per
// probe it reports wall time, heap allocations, CPU time (getrusage) and
// the TIME_WAIT sockets left on the prober's side; for the schedulers, probes
// per second, CPU cores of the prober and of the servers, CPU time per probe,
// scheduling lag and false failures. The servers run in a child process, so
// the CPU figures are the probers'. For the TCP, HTTP and gRPC comparisons
// they listen on 127.0.0.1; for the schedulers, when the benchmark runs as
// root in hack/netns.sh (make bench-probes), it measures each run twice, side
// by side: with the servers on 127.0.0.1 and with the servers in a network
// namespace of their own that it creates, linked by a veth pair on
// 198.18.0.0/30 (-server-netns=false: loopback only). No packet goes
// anywhere else. Speed is measured here, never asserted in tests: the
// machines are shared and noisy, so compare the ratios of one run, not
// figures across runs.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	kubegrpc "k8s.io/kubernetes/pkg/probe/grpc"
	kubetcp "k8s.io/kubernetes/pkg/probe/tcp"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/grpchealth"
)

type options struct {
	rounds    int
	tcpOps    int
	httpOps   int
	grpcOps   int
	sched     SchedConfig
	kubeSched bool
	// grpcTargets and grpcListeners size the gRPC scheduler load; the
	// rest of its configuration is sched's.
	grpcTargets   int
	grpcListeners int
	only          string
	deadline      time.Duration
	withGoals     bool
	// serverNetns runs the scheduler loads twice: servers in a network
	// namespace of their own, then on loopback.
	serverNetns bool
	cpuProfile  string
}

func main() {
	if serveChild() {
		return
	}
	var o options
	flag.IntVar(&o.rounds, "rounds", 7, "interleaved rounds of each TCP and HTTP comparison (medians are reported)")
	flag.IntVar(&o.tcpOps, "tcp-ops", 4000, "TCP probes per variant and round")
	flag.IntVar(&o.httpOps, "http-ops", 1500, "HTTP probes per variant and round")
	flag.IntVar(&o.grpcOps, "grpc-ops", 1000, "gRPC probes per variant and round")
	flag.IntVar(&o.sched.Targets, "targets", 10000, "scheduler: TCP targets")
	flag.IntVar(&o.sched.Listeners, "listeners", 10000, "scheduler: listening ports the targets spread over")
	flag.DurationVar(&o.sched.Period, "period", time.Second, "scheduler: period of every target")
	flag.DurationVar(&o.sched.Warmup, "warmup", 2*time.Second, "scheduler: unmeasured start (the first, jittered round)")
	flag.DurationVar(&o.sched.Duration, "duration", 15*time.Second, "scheduler: measured window")
	flag.IntVar(&o.grpcTargets, "grpc-targets", 1000, "gRPC scheduler: gRPC targets (period, warm-up and window as the scheduler's)")
	flag.IntVar(&o.grpcListeners, "grpc-listeners", 1000, "gRPC scheduler: listening ports the targets spread over")
	flag.BoolVar(&o.kubeSched, "kubelet-scheduler", true, "scheduler: also run the load with kubelet's prober, through our scheduler and the way kubelet's workers do")
	flag.BoolVar(&o.serverNetns, "server-netns", netnsDefault(), "scheduler: also run every load with the servers in a network namespace of their own, over a veth pair (198.18.0.0/30), side by side with loopback (needs root; default: as root inside hack/netns.sh)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "scheduler: write a CPU profile (pprof) of the prober over the measured window of our scheduler's run (servers in their own namespace with -server-netns) to this file")
	flag.StringVar(&o.only, "only", allComparisons, "comparisons to run, comma-separated, of "+allComparisons)
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

// allComparisons are the names -only takes, in the order they run.
const allComparisons = "tcp,http,grpc,scheduler,grpc-scheduler"

func run(w io.Writer, o options) error {
	want := map[string]bool{}
	for _, s := range strings.Split(o.only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(strings.Split(allComparisons, ","), s) {
			return fmt.Errorf("-only: unknown comparison %q (want some of %s)", s, allComparisons)
		}
		want[s] = true
	}
	fmt.Fprintf(w, "Probers side by side: %s %s/%s, %d CPUs, GOMAXPROCS %d; servers in a child process.\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintln(w, "CPU is getrusage of this process (user+sys); the sys part includes kernel work for the server's side of the packets (see the scheduler's notes).")
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
	if want["grpc"] {
		fmt.Fprintf(w, "\nLoad average before gRPC: %s\n", loadAverage())
		c, err := compare("gRPC: Health/Check, a connection per probe", "grpc", grpcVariants(), o.rounds, o.grpcOps)
		if err != nil {
			return fmt.Errorf("gRPC: %w", err)
		}
		printComparison(w, c)
		if o.withGoals {
			ours, kube := c.Row("ours").Median, c.Row("kubelet").Median
			goal(w, "cheaper than kubelet's (CPU/op and allocs/op)", ours.CPUUsPerOp() < kube.CPUUsPerOp() && ours.AllocsPerOp < kube.AllocsPerOp)
		}
	}
	if want["scheduler"] {
		if err := runSchedulers(w, o); err != nil {
			return err
		}
	}
	if want["grpc-scheduler"] {
		if err := runGRPCSchedulers(w, o); err != nil {
			return err
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

// load is one way of running a scheduler load.
type load struct {
	name string
	run  func(SchedConfig) (*SchedRow, error)
}

// runSchedulers runs the TCP scheduler loads, in each placement of the
// servers, and prints them.
func runSchedulers(w io.Writer, o options) error {
	tcp, err := probes.NewTCP(probes.TCPConfig{})
	if err != nil {
		return err
	}
	// The same prober through a net.Dialer: what its direct system calls
	// (Linux, IP targets) save.
	viaDialer, err := probes.NewTCP(probes.TCPConfig{Dialer: &net.Dialer{KeepAlive: -1}})
	if err != nil {
		return err
	}
	loads := []load{
		{"our scheduler", func(cfg SchedConfig) (*SchedRow, error) {
			return runScheduler(cfg, "swh probes.Scheduler + TCPProber", tcp)
		}},
		{"our scheduler, prober through a net.Dialer", func(cfg SchedConfig) (*SchedRow, error) {
			return runScheduler(cfg, "swh probes.Scheduler + TCPProber via net.Dialer", viaDialer)
		}},
	}
	if o.kubeSched {
		loads = append(loads,
			load{"our scheduler with kubelet's prober", func(cfg SchedConfig) (*SchedRow, error) {
				return runScheduler(cfg, "swh probes.Scheduler + kubelet pkg/probe/tcp", kubeletTCP{kubetcp.New()})
			}},
			load{"kubelet-style scheduler", runKubeletStyle})
	}
	var profile *os.File
	if o.cpuProfile != "" {
		if profile, err = os.Create(o.cpuProfile); err != nil {
			return err
		}
		defer profile.Close()
	}
	placements, rows, err := runLoads(w, o, o.sched, loads, profile)
	if err != nil {
		return err
	}
	if o.withGoals {
		r := rows[placements[0]][0]
		expected := float64(o.sched.Targets) / o.sched.Period.Seconds()
		fmt.Fprintf(w, "Goals, for our scheduler and prober, %s:\n", goalsWhere(placements))
		goal(w, fmt.Sprintf("%s probes/s (within 1%%)", thousands(expected)), r.ProbesPerSec >= 0.99*expected)
		goal(w, fmt.Sprintf("<= 0.5 cores at %s probes/s (%.3f)", thousands(expected), r.Cores), r.Cores <= 0.5 && r.ProbesPerSec >= 0.99*expected)
		goal(w, "scheduling lag p99 under 50ms", r.LagP99 < 50*time.Millisecond)
		goal(w, "zero false failures", r.FalseFailures() == 0)
	}
	return nil
}

// runGRPCSchedulers runs the gRPC scheduler loads: our scheduler with our
// gRPC prober, then with kubelet's, in each placement of the servers, and
// prints them.
func runGRPCSchedulers(w io.Writer, o options) error {
	ours, err := grpchealth.New(grpchealth.Config{})
	if err != nil {
		return err
	}
	loads := []load{
		{"our scheduler with our gRPC prober", func(cfg SchedConfig) (*SchedRow, error) {
			return runScheduler(cfg, "swh probes.Scheduler + grpchealth.Prober", ours)
		}},
		{"our scheduler with kubelet's gRPC prober", func(cfg SchedConfig) (*SchedRow, error) {
			return runScheduler(cfg, "swh probes.Scheduler + kubelet pkg/probe/grpc", kubeletGRPC{kubegrpc.New()})
		}},
	}
	cfg := o.sched
	cfg.Kind, cfg.Targets, cfg.Listeners = "grpc", o.grpcTargets, o.grpcListeners
	placements, rows, err := runLoads(w, o, cfg, loads, nil)
	if err != nil {
		return err
	}
	if o.withGoals {
		r, kube := rows[placements[0]][0], rows[placements[0]][1]
		expected := float64(cfg.Targets) / cfg.Period.Seconds()
		fmt.Fprintf(w, "Goals, for our scheduler and gRPC prober, %s:\n", goalsWhere(placements))
		goal(w, fmt.Sprintf("%s probes/s (within 1%%)", thousands(expected)), r.ProbesPerSec >= 0.99*expected)
		goal(w, fmt.Sprintf("fewer prober cores than with kubelet's gRPC prober (%.3f, %.3f)", r.Cores, kube.Cores),
			r.Cores < kube.Cores && r.ProbesPerSec >= 0.99*kube.ProbesPerSec)
		goal(w, "zero false failures", r.FalseFailures() == 0)
	}
	return nil
}

// goalsWhere says where the servers of the first placement, the one the
// goals are judged in, were.
func goalsWhere(placements []Placement) string {
	if placements[0] != Netns {
		return "servers on loopback: no netns run (-server-netns=false, or not root in hack/netns.sh)"
	}
	return "servers in their own network namespace"
}

// runLoads runs every load in every placement of the servers, base giving
// the rest of the configuration, and prints the tables; profile, if not nil,
// receives a CPU profile of the first load's first run. It returns the
// placements, in order, and the rows of each, in the order of loads.
func runLoads(w io.Writer, o options, base SchedConfig, loads []load, profile io.Writer) ([]Placement, map[Placement][]*SchedRow, error) {
	placements := []Placement{Loopback}
	if o.serverNetns {
		placements = []Placement{Netns, Loopback}
	}
	// Each load runs in every placement before the next load, so that
	// the rows compared across placements are measured close in time.
	what := "scheduler"
	if base.kind() == "grpc" {
		what = "gRPC scheduler"
	}
	rows := map[Placement][]*SchedRow{}
	for i, l := range loads {
		for _, p := range placements {
			fmt.Fprintf(w, "\nLoad average before the %s (%s, servers on %s): %s\n", what, l.name, p, loadAverage())
			cfg := base
			cfg.Placement = p
			if i == 0 && p == placements[0] && profile != nil {
				cfg.Profile = profile
			}
			r, err := l.run(cfg)
			if err != nil {
				return nil, nil, fmt.Errorf("%s, servers on %s: %w", l.name, p, err)
			}
			rows[p] = append(rows[p], r)
		}
	}
	for _, p := range placements {
		fmt.Fprintln(w)
		cfg := base
		cfg.Placement = p
		printScheduler(w, cfg, rows[p])
	}
	fmt.Fprintln(w)
	printPlacements(w, base, placements, rows)
	return placements, rows, nil
}

// printPlacements prints the CPU figures of every load in every placement
// of the servers, side by side, and what the kernel charges to whom.
func printPlacements(w io.Writer, cfg SchedConfig, placements []Placement, rows map[Placement][]*SchedRow) {
	fmt.Fprintf(w, "%s, CPU by placement of the servers:\n", cfg.title())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tservers\tprobes/s\tprober cores\tuser\tsys\tserver cores\tsoftirq cores (machine)\tprober CPU µs/probe\t")
	for i := range rows[placements[0]] {
		for _, p := range placements {
			r := rows[p][i]
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t\n", r.Name, p, r.ProbesPerSec, r.Cores, r.UserCores, r.Cores-r.UserCores,
				r.ServerCores, r.SoftirqCores, float64(r.CPUPerProbe())/float64(time.Microsecond))
		}
	}
	if len(placements) == 2 {
		for i, a := range rows[placements[0]] {
			b := rows[placements[1]][i]
			fmt.Fprintf(tw, "%s / %s, %s\t\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", placements[0], placements[1], shortName(a.Name),
				x(a.ProbesPerSec, b.ProbesPerSec), x(a.Cores, b.Cores), x(a.UserCores, b.UserCores), x(a.Cores-a.UserCores, b.Cores-b.UserCores),
				x(a.ServerCores, b.ServerCores), x(a.SoftirqCores, b.SoftirqCores), x(float64(a.CPUPerProbe()), float64(b.CPUPerProbe())))
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "(prober cores: getrusage of this process, user + sys; server cores: the server process's; softirq: /proc/stat, the whole machine,")
	fmt.Fprintln(w, " sampled at each tick, other processes' included; prober CPU µs/probe: prober cores / probes/s)")
	switch irqTimeAccounting() {
	case "n":
		fmt.Fprintln(w, "Kernel: CONFIG_IRQ_TIME_ACCOUNTING is not set, so softirq time is charged to the task it interrupts. On loopback and on a")
		fmt.Fprintln(w, " veth pair alike, a packet is processed in a softirq on the sending CPU right after the send, and the answer it")
		fmt.Fprintln(w, " triggers (the server's SYN-ACK) is sent and processed from there too: the kernel's work for both ends of each")
		fmt.Fprintln(w, " handshake and reset is still charged to the prober. Its own namespace takes the server process's system calls")
		fmt.Fprintln(w, " (accept, read, close) off the prober's CPU figures, as loopback already did, and adds the veth's forwarding.")
	case "y":
		fmt.Fprintln(w, "Kernel: CONFIG_IRQ_TIME_ACCOUNTING=y: softirq time is kept out of every task's CPU time (unless disabled at boot), so")
		fmt.Fprintln(w, " the kernel's packet processing is not in the prober's figures; the softirq column shows how much there was.")
	default:
		fmt.Fprintln(w, "Kernel: its configuration is unreadable (no /proc/config.gz or /boot/config-*): whether softirq time is charged to")
		fmt.Fprintln(w, " the prober (CONFIG_IRQ_TIME_ACCOUNTING unset) is unknown.")
	}
}

// thousands formats n with a comma every three digits.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func printScheduler(w io.Writer, cfg SchedConfig, rows []*SchedRow) {
	fmt.Fprintf(w, "%s, servers on %s: %d %s targets on %d ports of %s, period %v, measured for %v after %v of warm-up\n",
		cfg.title(), cfg.Placement, cfg.Targets, cfg.label(), cfg.Listeners, cfg.Placement.describe(), cfg.Period, cfg.Duration, cfg.Warmup)
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
	if cfg.kind() == "grpc" {
		fmt.Fprintln(w, "(lag: Report.Started - Report.Scheduled; probe: the probe's own duration (connect, Health/Check, close); cores: CPU time / wall")
		fmt.Fprintln(w, " time; TIME_WAIT: the prober's sockets to the listeners in TIME_WAIT at the end of the window (warm-up included), + those the")
		fmt.Fprintln(w, " shutdown added; both probers open one connection per probe, kubelet's a grpc-go ClientConn)")
		return
	}
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
	switch {
	case strings.HasPrefix(name, "kubelet-style"):
		return "kubelet-style"
	case strings.HasSuffix(name, "kubelet pkg/probe/tcp"), strings.HasSuffix(name, "kubelet pkg/probe/grpc"):
		return "our scheduler + kubelet's prober"
	case strings.HasSuffix(name, "via net.Dialer"):
		return "ours via net.Dialer"
	}
	return "ours"
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
