package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// The ports of BenchmarkAgentProbeKinds. The load's server of each kind
// listens on 0.0.0.0:kindsLoadPort, so one listener (one redis-server, one
// MariaDB...) answers on every pod address: 10.244.0.0/16 is local inside
// hack/netns.sh. Kinds run one after the other and each stops its servers,
// so they share the port. The flipped pods' servers listen on
// kindsFlipPort, one per pod address where the server is in-process.
const (
	kindsLoadPort = 19100
	kindsFlipPort = 19101
	// kindsFlipPeriod is the period of the flipped resource, whatever the
	// load's: with failureThreshold 1, a flip reaches the watch within
	// about kindsFlipPeriod (the wait for the probe's turn) plus the
	// agent's coalescing window and write.
	kindsFlipPeriod = time.Second
)

// probeKind is one load of BenchmarkAgentProbeKinds.
type probeKind struct {
	name  string
	shape string
	// period of the load's probes.
	period time.Duration
	// pods caps the load's pods (0: all of them).
	pods int
	// start starts the kind's servers and returns the probes to run;
	// skip, when not empty, skips the kind with that reason, printed.
	start func(ctx context.Context, b *testing.B, k *kindsEnv) (run *kindRun, skip string)
}

// kindsEnv is what a kind's start needs of the benchmark.
type kindsEnv struct {
	c        client.Client
	ns       string
	flipPods []scalePod
	cleanups []func()
}

// cleanup runs f when the kind ends (or the benchmark does, if it fails).
func (k *kindsEnv) cleanup(b *testing.B, f func()) {
	var once sync.Once
	g := func() { once.Do(f) }
	k.cleanups = append(k.cleanups, g)
	b.Cleanup(g)
}

func (k *kindsEnv) stopAll() {
	for i := len(k.cleanups) - 1; i >= 0; i-- {
		k.cleanups[i]()
	}
	k.cleanups = nil
}

// kindRun is a kind's probes and servers, started.
type kindRun struct {
	// probe runs three times on every load pod, on kindsLoadPort.
	probe swhv1alpha1.Probe
	// flipProbe runs once on every flipped pod, on flipPort.
	flipProbe swhv1alpha1.Probe
	flipPort  int
	// flip makes the flipped pods' backends fail, or pass again.
	flip func(failing bool)
	// backendCPU is the CPU seconds of the servers; backend says whose.
	backendCPU func() float64
	backend    string
}

func kindProbe(mode swhv1alpha1.ProbeMode, port int) swhv1alpha1.Probe {
	p := fastProbe(mode, intstr.FromInt32(int32(port)))
	switch mode {
	case swhv1alpha1.ProbeModeGRPC:
		p.GRPC = &swhv1alpha1.GRPCProbe{TargetPort: intstr.FromInt32(int32(port))}
	case swhv1alpha1.ProbeModeRedis:
		p.Redis = &swhv1alpha1.RedisProbe{TargetPort: intstr.FromInt32(int32(port)), Role: swhv1alpha1.RedisRoleMaster, TLSMode: swhv1alpha1.DatabaseTLSDisable}
	}
	return p
}

func tcpScriptProbe(port int) swhv1alpha1.Probe {
	p := kindProbe(swhv1alpha1.ProbeModeTCP, port)
	p.TCP.Steps = []swhv1alpha1.TCPStep{
		{Expect: &swhv1alpha1.ProbeExpect{Regexp: `^220 `}},
		{Send: "QUIT\r\n"},
	}
	return p
}

func httpBodyProbe(port int) swhv1alpha1.Probe {
	p := kindProbe(swhv1alpha1.ProbeModeHTTP, port)
	p.HTTP.ExpectBody = &swhv1alpha1.HTTPExpectBody{Regexp: `"status":\s*"ok"`, WithinBytes: 1024}
	return p
}

// inProcess starts a load server on 0.0.0.0:kindsLoadPort and one server
// per flipped pod on its address, all in this process.
func inProcess[S any](b *testing.B, k *kindsEnv, start func(addr string) (S, error), stop func(S)) (load S, flip []S) {
	var err error
	if load, err = start(net.JoinHostPort("0.0.0.0", strconv.Itoa(kindsLoadPort))); err != nil {
		b.Fatalf("listening on every pod address: %v", err)
	}
	k.cleanup(b, func() { stop(load) })
	for _, p := range k.flipPods {
		s, err := start(net.JoinHostPort(p.ip, strconv.Itoa(kindsFlipPort)))
		if err != nil {
			b.Fatal(err)
		}
		k.cleanup(b, func() { stop(s) })
		flip = append(flip, s)
	}
	return load, flip
}

func thisProcessCPU(b *testing.B) func() float64 {
	return func() float64 { return processCPU(b, os.Getpid(), false) }
}

const thisProcess = "this test process"

func probeKinds() []probeKind {
	tcpServer := func(greeting string) func(string) (*harness.TCPServer, error) {
		return func(addr string) (*harness.TCPServer, error) {
			s, err := harness.StartTCPServer(addr)
			if err == nil {
				s.SetGreeting(greeting)
			}
			return s, err
		}
	}
	stopTCP := func(s *harness.TCPServer) { _ = s.Stop() }
	httpServer := func(body string) func(string) (*harness.HTTPServer, error) {
		return func(addr string) (*harness.HTTPServer, error) {
			s, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: addr})
			if err == nil && body != "" {
				s.SetBody(body)
			}
			return s, err
		}
	}
	stopHTTP := func(s *harness.HTTPServer) { _ = s.Stop() }
	const greeting, busy = "220 mail.example.test ESMTP\r\n", "421 mail.example.test too busy\r\n"
	const okBody, degradedBody = `{"status": "ok"}`, `{"status": "degraded"}`
	return []probeKind{
		{name: "TCP", shape: "connect", period: time.Second, start: func(_ context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			_, flip := inProcess(b, k, tcpServer(""), stopTCP)
			return &kindRun{
				probe: kindProbe(swhv1alpha1.ProbeModeTCP, kindsLoadPort), flipProbe: kindProbe(swhv1alpha1.ProbeModeTCP, kindsFlipPort), flipPort: kindsFlipPort,
				flip: func(failing bool) {
					for _, s := range flip {
						if failing {
							_ = s.Stop() // refused from now on
						} else if err := s.Start(); err != nil {
							b.Fatal(err)
						}
					}
				},
				backendCPU: thisProcessCPU(b), backend: thisProcess,
			}, ""
		}},
		{name: "TCP script", shape: `expect /^220 /, send QUIT`, period: time.Second, start: func(_ context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			_, flip := inProcess(b, k, tcpServer(greeting), stopTCP)
			return &kindRun{
				probe: tcpScriptProbe(kindsLoadPort), flipProbe: tcpScriptProbe(kindsFlipPort), flipPort: kindsFlipPort,
				flip: func(failing bool) {
					for _, s := range flip {
						s.SetGreeting(map[bool]string{true: busy, false: greeting}[failing])
					}
				},
				backendCPU: thisProcessCPU(b), backend: thisProcess,
			}, ""
		}},
		{name: "HTTP", shape: "GET /, status 200-399", period: time.Second, start: func(_ context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			_, flip := inProcess(b, k, httpServer(""), stopHTTP)
			return &kindRun{
				probe: kindProbe(swhv1alpha1.ProbeModeHTTP, kindsLoadPort), flipProbe: kindProbe(swhv1alpha1.ProbeModeHTTP, kindsFlipPort), flipPort: kindsFlipPort,
				flip: func(failing bool) {
					for _, s := range flip {
						s.SetStatus(map[bool]int{true: http.StatusServiceUnavailable, false: http.StatusOK}[failing])
					}
				},
				backendCPU: thisProcessCPU(b), backend: thisProcess,
			}, ""
		}},
		{name: "HTTP body", shape: `GET /, expectBody /"status":\s*"ok"/`, period: time.Second, start: func(_ context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			_, flip := inProcess(b, k, httpServer(okBody), stopHTTP)
			return &kindRun{
				probe: httpBodyProbe(kindsLoadPort), flipProbe: httpBodyProbe(kindsFlipPort), flipPort: kindsFlipPort,
				flip: func(failing bool) {
					for _, s := range flip {
						s.SetBody(map[bool]string{true: degradedBody, false: okBody}[failing])
					}
				},
				backendCPU: thisProcessCPU(b), backend: thisProcess,
			}, ""
		}},
		{name: "GRPC", shape: "Health/Check over h2c", period: time.Second, start: func(_ context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			_, flip := inProcess(b, k, func(addr string) (*harness.GRPCHealthServer, error) {
				return harness.StartGRPCHealthServer(harness.GRPCHealthServerOptions{Addr: addr})
			}, (*harness.GRPCHealthServer).Stop)
			return &kindRun{
				probe: kindProbe(swhv1alpha1.ProbeModeGRPC, kindsLoadPort), flipProbe: kindProbe(swhv1alpha1.ProbeModeGRPC, kindsFlipPort), flipPort: kindsFlipPort,
				flip: func(failing bool) {
					for _, s := range flip {
						s.SetServing("", !failing)
					}
				},
				backendCPU: thisProcessCPU(b), backend: thisProcess,
			}, ""
		}},
		{name: "Redis", shape: "PING + ROLE, role Master", period: time.Second, start: func(ctx context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			load, err := harness.StartRedis(ctx, harness.RedisOptions{Addr: "0.0.0.0", Port: kindsLoadPort})
			if errors.Is(err, harness.ErrMissingDependency) {
				return nil, err.Error()
			}
			if err != nil {
				b.Fatal(err)
			}
			k.cleanup(b, func() { _ = load.Close() })
			// The flipped pods share a second server of their own: it
			// turns replica (of nothing) and back, so the role check fails.
			flip, err := harness.StartRedis(ctx, harness.RedisOptions{Addr: "0.0.0.0", Port: kindsFlipPort})
			if err != nil {
				b.Fatal(err)
			}
			k.cleanup(b, func() { _ = flip.Close() })
			pid := pidOf(b, "redis-server", ":"+strconv.Itoa(kindsLoadPort))
			return &kindRun{
				probe: kindProbe(swhv1alpha1.ProbeModeRedis, kindsLoadPort), flipProbe: kindProbe(swhv1alpha1.ProbeModeRedis, kindsFlipPort), flipPort: kindsFlipPort,
				flip: func(failing bool) {
					var err error
					if failing {
						err = flip.ReplicaOf(ctx, "127.0.0.1", 9) // discard: nothing answers
					} else {
						err = flip.Promote(ctx)
					}
					if err != nil {
						b.Fatal(err)
					}
				},
				backendCPU: func() float64 { return processCPU(b, pid, false) }, backend: "redis-server",
			}, ""
		}},
		{name: "MySQL", shape: "log in (native password), SELECT 1", period: time.Second, start: func(ctx context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			// The load's probes all start together, up to the agent's 256
			// in flight for a namespace, on one server: its listen backlog
			// (back_log, sized from max_connections: 130 for 400, 450 for
			// 2,000) must hold them, or the
			// connections it drops time out. A node's real servers each
			// take three.
			db, err := harness.StartMariaDB(ctx, harness.MariaDBOptions{Addr: "0.0.0.0", Port: kindsLoadPort, MaxConnections: 2000})
			if errors.Is(err, harness.ErrMissingDependency) {
				return nil, err.Error()
			}
			if err != nil {
				b.Fatal(err)
			}
			k.cleanup(b, func() { _ = db.Close() })
			// The flipped pods' probe reads a flag of its own on the same
			// server: one server answers every pod address alike.
			for _, q := range []string{"CREATE DATABASE swh_bench", "CREATE TABLE swh_bench.flip (up BOOLEAN NOT NULL)", "INSERT INTO swh_bench.flip VALUES (1)"} {
				if err := db.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			secret := kindsSecret(ctx, b, k, "mysql-credentials", db.Options().User, db.Options().Password)
			probe := func(query string) swhv1alpha1.Probe {
				return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeMySQL, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
					MySQL: &swhv1alpha1.MySQLProbe{TargetPort: intstr.FromInt32(kindsLoadPort), Query: query, AuthSecretName: secret, TLSMode: swhv1alpha1.DatabaseTLSDisable}}
			}
			pid := pidFile(b, filepath.Join(db.Dir(), "mariadbd.pid"))
			return &kindRun{
				probe: probe("SELECT 1"), flipProbe: probe("SELECT up FROM swh_bench.flip"), flipPort: kindsLoadPort,
				flip: func(failing bool) {
					if err := db.Exec(ctx, "UPDATE swh_bench.flip SET up = "+map[bool]string{true: "0", false: "1"}[failing]); err != nil {
						b.Fatal(err)
					}
				},
				backendCPU: func() float64 { return processCPU(b, pid, false) }, backend: "mariadbd",
			}, ""
		}},
		{name: "PostgreSQL", shape: "log in (SCRAM), SELECT 1", period: 2 * time.Second, pods: 50, start: func(ctx context.Context, b *testing.B, k *kindsEnv) (*kindRun, string) {
			pg, err := harness.StartPostgres(ctx, harness.PostgresOptions{Addr: "0.0.0.0", Port: kindsLoadPort, MaxConnections: 300})
			if errors.Is(err, harness.ErrMissingDependency) {
				return nil, err.Error()
			}
			if err != nil {
				b.Fatal(err)
			}
			k.cleanup(b, func() { _ = pg.Close() })
			// The flipped pods' probe reads a flag of its own on the same
			// server: one server answers every pod address alike.
			for _, q := range []string{"CREATE TABLE swh_flip (up boolean NOT NULL)", "INSERT INTO swh_flip VALUES (true)"} {
				if err := pg.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			secret := kindsSecret(ctx, b, k, "pg-credentials", pg.Options().User, pg.Options().Password)
			probe := func(query string) swhv1alpha1.Probe {
				p := postgresProbe(query, secret)
				p.PostgreSQL.TargetPort = intstr.FromInt32(kindsLoadPort)
				return p
			}
			postmaster := postmasterPID(b, pg)
			return &kindRun{
				probe: probe("SELECT 1"), flipProbe: probe("SELECT up FROM swh_flip"), flipPort: kindsLoadPort,
				flip: func(failing bool) {
					if err := pg.Exec(ctx, "UPDATE swh_flip SET up = "+strconv.FormatBool(!failing)); err != nil {
						b.Fatal(err)
					}
				},
				backendCPU: func() float64 { return processCPU(b, postmaster, true) }, backend: "postmaster and its backends",
			}, ""
		}},
	}
}

// kindsSecret creates a Secret with user and password for the kind.
func kindsSecret(ctx context.Context, b *testing.B, k *kindsEnv, name, user, password string) string {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: name},
		StringData: map[string]string{"user": user, "password": password}}
	if err := k.c.Create(ctx, secret); err != nil {
		b.Fatal(err)
	}
	k.cleanup(b, func() { _ = k.c.Delete(context.Background(), secret) })
	return name
}

// pidFile reads a server's PID from its PID file.
func pidFile(b *testing.B, path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	return pid
}

// pidOf finds the process whose command line contains every arg (Redis
// rewrites its own: "redis-server 0.0.0.0:PORT").
func pidOf(b *testing.B, args ...string) int {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && !slices.ContainsFunc(args, func(a string) bool { return !strings.Contains(string(cmdline), a) }) {
			return pid
		}
	}
	b.Fatalf("no process runs with %q", args)
	return 0
}

// kindFigures are one kind's results.
type kindFigures struct {
	scaleFigures
	// failed counts failed probes by mode and reason, since the agent started.
	failed map[string]float64
	toFail []time.Duration
	// writeDelay is the agent's mean verdict -> write delay over the flips.
	writeDelay time.Duration
	// probeTime is the mean duration of a probe, connection and close
	// included, over the measurement.
	probeTime time.Duration
}

// durationSum is the agent's swh_agent_probe_duration_seconds, every
// mode and status summed.
type durationSum struct{ sum, count float64 }

func (d durationSum) meanSince(before durationSum) time.Duration {
	if d.count == before.count {
		return 0
	}
	return time.Duration((d.sum - before.sum) / (d.count - before.count) * float64(time.Second))
}

func probeDuration(b *testing.B, a *scaleAgent) durationSum {
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(a.metricsURL)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var d durationSum
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "swh_agent_probe_duration_seconds_sum":
			d.sum += v
		case "swh_agent_probe_duration_seconds_count":
			d.count += v
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkAgentProbeKinds runs bin/swh-agent for one node carrying
// SWH_BENCH_KINDS_PODS pods (1,000 by default), one pod address each, and
// one resource selecting them with three probes of one kind, for each kind
// in turn with a fresh agent: TCP connect, a TCP script (expect a 220
// greeting, send QUIT), HTTP, HTTP with expectBody, gRPC health over h2c,
// Redis (role Master), MySQL (MariaDB) and PostgreSQL (on
// SWH_BENCH_KINDS_PG_PODS pods, 50, every 2 s: a real server forks a
// backend per connection). The three probes share one port: one real
// server per kind, on 0.0.0.0, then answers every pod address (three
// ports would take three redis-servers and three MariaDBs), and the agent
// runs them as three targets all the same. It reports the probes per
// second the agent counted, its CPU (utime + stime over
// SWH_BENCH_KINDS_WINDOW, 20 s, rounded up to whole periods, after a
// warm-up) and its CPU per probe against the TCP connect figure of the
// same run. Then, with the load running, it flips the backends of
// SWH_BENCH_KINDS_FLIPS pods (10) of a second resource, probed by the same
// kind every second with failureThreshold 1, to failing together,
// SWH_BENCH_KINDS_TRIALS times (5), each at a random point of the period,
// and times each flip to the slice change seen by a watch. SWH_BENCH_KINDS
// (e.g. "TCP,GRPC") picks kinds; SWH_BENCH_KINDS_PERIODS (e.g.
// "GRPC=2s,MySQL=5s") sets the load's periods. Run it with
// `make bench-agent`.
func BenchmarkAgentProbeKinds(b *testing.B) {
	pods := envInt(b, "SWH_BENCH_KINDS_PODS", 1000)
	pgPods := envInt(b, "SWH_BENCH_KINDS_PG_PODS", 50)
	flips := max(1, envInt(b, "SWH_BENCH_KINDS_FLIPS", 10))
	trials := max(1, envInt(b, "SWH_BENCH_KINDS_TRIALS", 5))
	window := envDuration(b, "SWH_BENCH_KINDS_WINDOW", 20*time.Second)
	kinds := probeKinds()
	if v := os.Getenv("SWH_BENCH_KINDS"); v != "" {
		kinds = slices.DeleteFunc(kinds, func(k probeKind) bool {
			return !slices.ContainsFunc(strings.Split(v, ","), func(name string) bool { return strings.EqualFold(strings.TrimSpace(name), k.name) })
		})
	}
	if v := os.Getenv("SWH_BENCH_KINDS_PERIODS"); v != "" {
		for _, kv := range strings.Split(v, ",") {
			name, d, _ := strings.Cut(kv, "=")
			period, err := time.ParseDuration(strings.TrimSpace(d))
			if err != nil || period < time.Second || period%time.Second != 0 {
				b.Fatalf("SWH_BENCH_KINDS_PERIODS: %q: want KIND=PERIOD in whole seconds", kv)
			}
			for i := range kinds {
				if strings.EqualFold(kinds[i].name, strings.TrimSpace(name)) {
					kinds[i].period = period
				}
			}
		}
	}
	for i := range kinds {
		if kinds[i].name == "PostgreSQL" {
			kinds[i].pods = pgPods
		}
		if kinds[i].pods == 0 || kinds[i].pods > pods {
			kinds[i].pods = pods
		}
	}
	const warmUp = 3 * time.Second
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
		node := ns + "-kinds"
		if _, err := harness.CreateNode(ctx, c, harness.NodeOptions{Name: node, Zone: "zone-a"}); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("agent CPU per probe kind: bin/swh-agent for one node with %d pods (one address each), one resource with 3 probes of one kind on one port per pod, one server on 0.0.0.0 answering every pod address; one kind at a time, each with a fresh agent, measured over %v or whole periods after a warm-up of %v. The machine (%d cores) is shared with other work: CPU figures move with its load, whose average was %s at the start:\n",
			pods, window, warmUp, runtime.NumCPU(), harness.LoadAverage())

		setupStart := time.Now()
		loadPods := createKindsPods(ctx, b, c, ns, node, "load", pods, func(i int) map[string]string {
			l := map[string]string{"app": "load"}
			if i < pgPods {
				l["pg"] = "yes"
			}
			return l
		})
		flipPods := createKindsPods(ctx, b, c, ns, node, "flip", flips, func(int) map[string]string { return map[string]string{"app": "flip"} })
		placeholder := kindProbe(swhv1alpha1.ProbeModeTCP, kindsLoadPort)
		for _, name := range []string{"load", "flip"} {
			if err := c.Create(ctx, resource(ns, name, []swhv1alpha1.ServicePort{{Name: "probe", Port: 80, TargetPort: intstr.FromInt32(kindsLoadPort)}}, placeholder)); err != nil {
				b.Fatal(err)
			}
		}
		fmt.Printf("  %d + %d pods created in %v\n", len(loadPods), len(flipPods), time.Since(setupStart).Round(time.Second))
		fmt.Printf("  %-11s %-38s %5s %6s %9s %6s %6s %8s %6s %8s %7s  %-26s %11s  %s\n",
			"kind", "each probe", "pods", "period", "probes/s", "failed", "cores", "µs/probe", "×TCP", "probe ms", "RSS MiB", "flip -> watch (1 s × 1)", "verdict->wr", "backend cores")

		var tcpUS float64
		for _, kind := range kinds {
			kindStart := time.Now()
			env := &kindsEnv{c: c, ns: ns, flipPods: flipPods}
			run, skip := kind.start(ctx, b, env)
			if skip != "" {
				fmt.Printf("  %-11s skipped: %s\n", kind.name, skip)
				continue
			}
			selector := map[string]string{"app": "load"}
			if kind.pods < pods {
				selector["pg"] = "yes"
				if kind.pods != pgPods {
					b.Fatalf("%s: only the first SWH_BENCH_KINDS_PG_PODS pods can be selected", kind.name)
				}
			}
			setKindProbes(ctx, b, c, ns, "load", selector, kindsLoadPort, kind.period, run.probe, run.probe, run.probe)
			setKindProbes(ctx, b, c, ns, "flip", map[string]string{"app": "flip"}, run.flipPort, kindsFlipPeriod, run.flipProbe)

			a := startScaleAgent(b, node)
			targets := kind.pods*3 + flips
			a.settle(ctx, b, ns, node, targets, kind.pods+flips)
			time.Sleep(max(warmUp, kind.period))
			// Whole periods: the probes of a resource run together.
			w := (window + kind.period - 1) / kind.period * kind.period
			d0 := probeDuration(b, a)
			f := kindFigures{scaleFigures: a.measure(b, w, run.backendCPU)}
			f.probeTime = probeDuration(b, a).meanSince(d0)
			f.pods = kind.pods
			before := a.scrape(b)
			f.failed = before.failed
			f.toFail = flipKindTrials(ctx, b, ns, flipPods, trials, run.flip)
			f.writeDelay = a.scrape(b).meanWriteDelay(before)
			a.stop()
			env.stopAll()

			ratio := "-"
			if kind.name == "TCP" {
				tcpUS = f.usPerProbe()
			}
			if tcpUS > 0 {
				ratio = fmt.Sprintf("%.2f", f.usPerProbe()/tcpUS)
			}
			fmt.Printf("  %-11s %-38s %5d %6v %9.1f %6.0f %6.3f %8.1f %6s %8.2f %7.1f  %-26s %11v  %.3f (%s)   [%v]\n",
				kind.name, kind.shape, f.pods, kind.period, f.probesPerSec, f.failures, f.cores, f.usPerProbe(), ratio, float64(f.probeTime.Microseconds())/1000, float64(f.rssKiB)/1024,
				durationP50Max(f.toFail), f.writeDelay.Round(time.Millisecond), f.backendCores, run.backend, time.Since(kindStart).Round(time.Second))
			if f.failures > 0 {
				fmt.Printf("  %-11s failed probes since the agent started, by mode and reason: %v\n", "", f.failed)
			}
			metric := strings.ReplaceAll(kind.name, " ", "-")
			b.ReportMetric(f.usPerProbe(), "us/probe-"+metric)
			if tcpUS > 0 && kind.name != "TCP" {
				b.ReportMetric(f.usPerProbe()/tcpUS, "xTCP-"+metric)
			}
		}
		fmt.Printf("  probes/s and CPU include the %d probes/s of the flipped resource. flip -> watch: %d pods of a second resource, probed by the same kind every %v with failureThreshold 1 under the load, their backends flipped to failing together at a random point of the period, %d times; from the flip to the watch event without them, against period × failureThreshold (the wait for the probe's turn, 0 to 1 s) plus the write; a TCP script against a server that keeps the connection open fails only at its timeout (1 s). probe ms: a probe's mean duration, connection and close included (the agent's swh_agent_probe_duration_seconds). verdict->wr: the agent's mean verdict -> write delay over those flips and their recoveries. Load average %s; the benchmark took %v\n",
			flips, flips, kindsFlipPeriod, trials, harness.LoadAverage(), time.Since(started).Round(time.Second))
	}
}

func durationP50Max(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %v  max %v", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// createKindsPods creates n pods named prefix-NNNN on node, each with an
// address of its own, 32 at a time.
func createKindsPods(ctx context.Context, b *testing.B, c client.Client, ns, node, prefix string, n int, labels func(int) map[string]string) []scalePod {
	ips := harness.PodIPs(b, n)
	out := make([]scalePod, n)
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				out[i] = scalePod{name: fmt.Sprintf("%s-%04d", prefix, i), ip: ips[i]}
				if _, err := harness.CreatePod(ctx, c, harness.PodOptions{
					Namespace: ns, Name: out[i].name, Node: node, Labels: labels(i), IPs: []string{ips[i]},
					Ports: []corev1.ContainerPort{{Name: "load", ContainerPort: kindsLoadPort}, {Name: "flip", ContainerPort: kindsFlipPort}},
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

// setKindProbes sets a resource's selector, the target port of its one
// port, its period and its probes.
func setKindProbes(ctx context.Context, b *testing.B, c client.Client, ns, name string, selector map[string]string, port int, period time.Duration, probes ...swhv1alpha1.Probe) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swh); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(swh.DeepCopy())
	swh.Spec.Selector = selector
	swh.Spec.Ports[0].TargetPort = intstr.FromInt32(int32(port))
	swh.Spec.Healthcheck = &swhv1alpha1.Healthcheck{PeriodSeconds: int32(period / time.Second), Probes: probes}
	if err := c.Patch(ctx, swh, patch); err != nil {
		b.Fatal(err)
	}
}

// flipKindTrials flips the backends of every pod of the resource "flip" to
// failing, trials times, each at a random point of the probes' period, and
// returns for each flip the delay from the flip to the watch event after
// which none of the pods is ready (the agent writes them together).
func flipKindTrials(ctx context.Context, b *testing.B, ns string, pods []scalePod, trials int, flip func(failing bool)) []time.Duration {
	var out []time.Duration
	all := func(m map[string]bool) bool { return len(m) == len(pods) }
	none := func(m map[string]bool) bool {
		return !slices.ContainsFunc(pods, func(p scalePod) bool { return m[p.name] })
	}
	for range trials {
		w := watchReady(ctx, b, ns, "flip")
		w.untilPort(b, "", all) // the watch's first events: every pod ready
		// Anywhere in the period: the restore below ends at the probes'
		// phase, and the wait for their next turn is part of the delay.
		time.Sleep(rand.N(kindsFlipPeriod))
		t0 := time.Now()
		flip(true)
		out = append(out, w.untilPort(b, "", none).Sub(t0))
		flip(false)
		w.untilPort(b, "", all)
		w.stop()
	}
	return out
}
