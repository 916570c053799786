package main

import (
	"bytes"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	kubegrpc "k8s.io/kubernetes/pkg/probe/grpc"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/grpchealth"
)

func TestMain(m *testing.M) {
	if serveChild() { // the test binary is its own server process too
		return
	}
	os.Exit(m.Run())
}

// TestSmallRun runs every comparison at a tiny scale, so that the benchmark
// keeps working; it checks outcomes (no failure, no TIME_WAIT from our
// prober), never speed.
func TestSmallRun(t *testing.T) {
	var out bytes.Buffer
	o := options{
		rounds: 1, tcpOps: 50, httpOps: 20, grpcOps: 20, only: allComparisons, kubeSched: true, serverNetns: netnsDefault(),
		sched:       SchedConfig{Targets: 100, Listeners: 10, Period: 200 * time.Millisecond, Warmup: 300 * time.Millisecond, Duration: time.Second},
		grpcTargets: 50, grpcListeners: 50,
	}
	if err := run(&out, o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	want := []string{"TCP: connect and close", "HTTP: GET /healthz", "Scheduler, servers on loopback: 100 TCP targets", "ours / kubelet pkg/probe/tcp",
		"ours / kubelet-style", "ours / our scheduler + kubelet's prober", "ours / ours via net.Dialer", "Scheduler, CPU by placement of the servers",
		"gRPC: Health/Check, a connection per probe", "ours / kubelet pkg/probe/grpc", "ours / raw grpc-go",
		"gRPC scheduler, servers on loopback: 50 gRPC targets", "swh probes.Scheduler + grpchealth.Prober", "swh probes.Scheduler + kubelet pkg/probe/grpc",
		"gRPC scheduler, CPU by placement of the servers"}
	if o.serverNetns {
		want = append(want, "Scheduler, servers on netns: 100 TCP targets on 10 ports of 198.18.0.2", "netns / loopback, ours",
			"gRPC scheduler, servers on netns: 50 gRPC targets on 50 ports of 198.18.0.2")
	} else {
		t.Log("not root inside hack/netns.sh: the scheduler ran with its servers on loopback only")
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the output lacks %q", w)
		}
	}
}

func TestComparisonOutcomes(t *testing.T) {
	c, err := compare("TCP", "tcp", tcpVariants(), 1, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Rows {
		if r.Median.Failures != 0 {
			t.Errorf("%s: %d failures", r.Name, r.Median.Failures)
		}
		if r.Role == "ours" && r.TimeWait != 0 {
			t.Errorf("%s left %d TIME_WAIT sockets, want 0", r.Name, r.TimeWait)
		}
	}
	tcp, err := probes.NewTCP(probes.TCPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	placements := []Placement{Loopback}
	if netnsDefault() {
		placements = append(placements, Netns)
	}
	for _, p := range placements {
		row, err := runScheduler(SchedConfig{Targets: 200, Listeners: 20, Period: 100 * time.Millisecond, Warmup: 200 * time.Millisecond, Duration: time.Second, Placement: p}, "ours", tcp)
		if err != nil {
			t.Fatalf("servers on %s: %v", p, err)
		}
		// The shutdown may leave a few (probes canceled mid-connect); the
		// run itself none.
		if row.Probes == 0 || row.FalseFailures() != 0 || row.TimeWait != 0 {
			t.Errorf("scheduler, servers on %s: %d probes, failures %s, %d TIME_WAIT; want probes, no failure, no TIME_WAIT", p, row.Probes, row.FailureSummary(), row.TimeWait)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + vethProber); err == nil {
		t.Errorf("the veth pair %s is left behind", vethProber)
	}
}

// TestGRPCOutcomes checks the gRPC comparison's outcomes: every variant
// passes against grpc-go's health server, ours leaves no TIME_WAIT, and both
// probers pass every probe under the scheduler.
func TestGRPCOutcomes(t *testing.T) {
	c, err := compare("gRPC", "grpc", grpcVariants(), 1, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != 3 {
		t.Fatalf("%d rows, want raw, ours and kubelet's", len(c.Rows))
	}
	for _, r := range c.Rows {
		if r.Median.Failures != 0 {
			t.Errorf("%s: %d failures", r.Name, r.Median.Failures)
		}
		if r.Role == "ours" && r.TimeWait != 0 {
			t.Errorf("%s left %d TIME_WAIT sockets, want 0", r.Name, r.TimeWait)
		}
	}
	ours, err := grpchealth.New(grpchealth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := SchedConfig{Kind: "grpc", Targets: 40, Listeners: 40, Period: 200 * time.Millisecond, Warmup: 200 * time.Millisecond, Duration: time.Second, Placement: Loopback}
	for name, p := range map[string]probes.Prober{"ours": ours, "kubelet": kubeletGRPC{kubegrpc.New()}} {
		row, err := runScheduler(cfg, name, p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if row.Probes == 0 || row.FalseFailures() != 0 {
			t.Errorf("gRPC scheduler, %s: %d probes, failures %s; want probes and no failure", name, row.Probes, row.FailureSummary())
		}
		if name == "ours" && row.TimeWait != 0 {
			t.Errorf("gRPC scheduler, ours: %d TIME_WAIT, want 0", row.TimeWait)
		}
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 10000: "10,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestProcAddr(t *testing.T) {
	tests := map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"0000000000000000FFFF00000100007F:0050": "127.0.0.1:80", // IPv4-mapped, in /proc/net/tcp6
		"00000000000000000000000001000000:0016": "[::1]:22",
	}
	for in, want := range tests {
		if got := procAddr(in); got != netip.MustParseAddrPort(want) {
			t.Errorf("procAddr(%q) = %v, want %s", in, got, want)
		}
	}
}
