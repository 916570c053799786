package controller_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/process"
)

// controllerProcess is bin/swh-controller running as a process, with its
// metrics and health endpoints on loopback.
type controllerProcess struct {
	*process.Proc
	metricsURL, ready string
	http              *http.Client
}

// startControllerProcess starts the binary as the cluster administrator,
// without leader election; the benchmark's end kills it if still running.
func startControllerProcess(b *testing.B, cp *harness.ControlPlane, bin string) *controllerProcess {
	metricsAddr, healthAddr := loopbackAddress(b), loopbackAddress(b)
	proc, err := process.Start(process.Spec{
		Name: "swh-controller", Path: bin, Output: os.Stderr, DiesWithSuite: true,
		Args: []string{"--leader-elect=false", "--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + healthAddr,
			"--zap-log-level=" + cmp.Or(os.Getenv("SWH_SCALE_LOG_LEVEL"), "error")},
		Env: []string{"KUBECONFIG=" + cp.Kubeconfig},
		// SIGTERM, as a Deployment would; one that takes longer fails the
		// benchmark (stop).
		StopTimeout: time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(proc.Kill)
	return &controllerProcess{
		Proc:       proc,
		metricsURL: "http://" + metricsAddr + "/metrics",
		ready:      "http://" + healthAddr + "/readyz",
		http:       &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}},
	}
}

func (p *controllerProcess) pid() int { return p.PID }

// loopbackAddress returns a free address on 127.0.0.1.
func loopbackAddress(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// waitReady waits until /readyz answers 200: the caches have synced.
func (p *controllerProcess) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.Exited():
			return fmt.Errorf("swh-controller exited before it was ready: %v", p.Err())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.ready, nil)
		if err != nil {
			return err
		}
		if resp, err := p.http.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("swh-controller not ready after %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the controller with SIGTERM, as a Deployment would.
func (p *controllerProcess) stop(b *testing.B) {
	start := time.Now()
	p.Stop()
	if took := time.Since(start); took >= time.Minute {
		b.Fatalf("swh-controller did not stop within a minute of SIGTERM (%s)", took.Round(time.Second))
	}
}

// quiet waits until the controller's write count has not moved for
// quietFor (at most two minutes), and returns the last scrape.
func (p *controllerProcess) quiet(b *testing.B, ctx context.Context) metrics {
	last := p.scrape(b, ctx)
	since, start := time.Now(), time.Now()
	for time.Since(since) < quietFor {
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("swh-controller kept writing for two minutes: %s", last.byMethod())
		}
		time.Sleep(500 * time.Millisecond)
		m := p.scrape(b, ctx)
		if m.writes() != last.writes() {
			since = time.Now()
		}
		last = m
	}
	return last
}

// scrape reads the controller's metrics.
func (p *controllerProcess) scrape(b *testing.B, ctx context.Context) metrics {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metricsURL, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		b.Fatalf("scraping swh-controller: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("scraping swh-controller: %s, %v", resp.Status, err)
	}
	m, err := parseMetrics(string(body))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// metrics are the samples of a Prometheus text exposition, keyed by name
// and labels.
type metrics map[string]sample

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// parseMetrics reads the text format: `name{labels} value`, comments skipped.
func parseMetrics(text string) (metrics, error) {
	out := metrics{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[cut+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		key := strings.TrimSpace(line[:cut])
		s := sample{name: key, labels: map[string]string{}, value: v}
		if i := strings.IndexByte(key, '{'); i >= 0 {
			s.name = key[:i]
			for _, m := range labelRE.FindAllStringSubmatch(key[i:], -1) {
				s.labels[m[1]] = m[2]
			}
		}
		out[key] = s
	}
	return out, nil
}

// minus returns the samples' increase since before (counters).
func (m metrics) minus(before metrics) metrics {
	out := make(metrics, len(m))
	for k, s := range m {
		s.value -= before[k].value
		out[k] = s
	}
	return out
}

// sum adds the samples of name whose labels include want.
func (m metrics) sum(name string, want map[string]string) float64 {
	total := 0.0
	for _, s := range m {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && s.labels[k] == v
		}
		if match {
			total += s.value
		}
	}
	return total
}

// writes is the number of write requests the process's clients sent.
func (m metrics) writes() float64 {
	total := 0.0
	for _, method := range writeMethods {
		total += m.sum("rest_client_requests_total", map[string]string{"method": method})
	}
	return total
}

// byMethod describes the write requests by method.
func (m metrics) byMethod() string {
	var parts []string
	for _, method := range writeMethods {
		if n := m.sum("rest_client_requests_total", map[string]string{"method": method}); n != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", method, int(n)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// byLabel describes the samples of name by one label's values.
func (m metrics) byLabel(name, label string) string {
	counts := map[string]float64{}
	for _, s := range m {
		if s.name == name && s.value != 0 {
			counts[s.labels[label]] += s.value
		}
	}
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, int(counts[k])))
	}
	return strings.Join(parts, ", ")
}

// procStatusKiB returns a field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
func procStatusKiB(b *testing.B, pid int, field string) int {
	kib, err := harness.ProcessMemoryKiB(pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return kib[0]
}

// cpuSeconds returns the CPU time (user and system) a process has used.
func cpuSeconds(b *testing.B, pid int) float64 {
	v, err := harness.ProcessCPU(pid, false)
	if err != nil {
		b.Fatal(err)
	}
	return v
}
