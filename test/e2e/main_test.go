// Package e2e shows the documented behaviour through the real data path:
// upstream kube-proxy (nftables or iptables mode) and kube-controller-manager,
// our controller and one agent per node, three node namespaces with routed
// pod namespaces running real HTTP, TCP and PostgreSQL backends, and clients
// that count where their requests land. It runs inside hack/netns.sh as root
// (make e2e); nothing touches the host's network namespace.
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/swh-dev/swh/test/harness"
)

var (
	proxyMode = flag.String("proxy-mode", "nftables", "kube-proxy mode: nftables or iptables")
	cluster   *Cluster
	report    Report
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	level := zapcore.ErrorLevel
	if testing.Verbose() {
		level = zapcore.InfoLevel
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level)))
	if err := requirements(); err != nil {
		if errors.Is(err, harness.ErrMissingDependency) && !harness.InCI() {
			fmt.Printf("skipping the e2e suite: %v\n", err)
			return 0
		}
		fmt.Printf("the e2e suite cannot run: %v\n", err)
		return 1
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, *proxyMode)
	code := 1
	if err != nil {
		if errors.Is(err, harness.ErrMissingDependency) && !harness.InCI() {
			fmt.Printf("skipping the e2e suite: %v\n", err)
			code = 0
		} else {
			fmt.Printf("starting the e2e cluster (%s): %v\n", *proxyMode, err)
		}
	} else {
		cluster = c
		fmt.Printf("e2e cluster (kube-proxy %s) up in %s\n", *proxyMode, time.Since(start).Round(100*time.Millisecond))
		code = m.Run()
		fmt.Print(report.Table(*proxyMode))
		window, others := c.Refusals()
		fmt.Printf("writes the API server refused: %d in the registration window, %d others\n", window, len(others))
		for _, line := range others[:min(len(others), 10)] {
			fmt.Println("  " + line)
		}
		if len(others) > 0 {
			fmt.Println("the controller or an agent was refused something it needs (RBAC or admission policy)")
			code = 1
		}
	}
	if c == nil {
		return code
	}
	if code != 0 {
		c.PrintLogs()
		// E2E_KEEP_LOGS=DIR keeps every component's whole log of a failed
		// run (the folder itself is removed below).
		if keep := os.Getenv("E2E_KEEP_LOGS"); keep != "" {
			if out, err := exec.Command("cp", "-a", c.dir, keep).CombinedOutput(); err != nil {
				fmt.Printf("keeping the logs in %s: %v: %s\n", keep, err, out)
			}
		}
	}
	if err := c.Stop(); err != nil {
		fmt.Printf("stopping the e2e cluster: %v\n", err)
		code = 1
	}
	if err := c.RemoveDir(); err != nil {
		fmt.Printf("removing the suite's folder: %v\n", err)
		code = 1
	}
	if err := c.Check(context.Background()); err != nil {
		fmt.Printf("leftovers after the e2e suite: %v\n", err)
		code = 1
	} else {
		fmt.Printf("final check: %d processes stopped by PID, %d network namespaces destroyed, no link, named namespace or folder left\n", len(c.procs.Procs()), len(c.procs.Namespaces()))
	}
	return code
}

// requirements checks that the suite runs as root inside hack/netns.sh: it
// creates namespaces, links and firewall rules, which it must never do in
// the host's own network namespace.
func requirements() error {
	if os.Getenv("SWH_NETNS") != "1" || os.Getenv("SWH_NETNS_ROOTLESS") == "1" || !harness.InNetworkSandbox() {
		return fmt.Errorf("%w: run the e2e suite as root inside hack/netns.sh (make e2e)", harness.ErrMissingDependency)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the e2e suite needs root (namespaces, kube-proxy)", harness.ErrMissingDependency)
	}
	return nil
}

// PrintLogs prints the end of every component's log.
func (c *Cluster) PrintLogs() {
	for _, p := range c.procs.Procs() {
		fmt.Printf("--- last lines of %s (pid %d) ---\n%s\n", p.Name, p.PID, p.LogTail(25))
	}
}

// Row is one measured step of a scenario.
type Row struct {
	Scenario, Step string
	// Measured counts the requests sent once converged.
	Measured Tally
	// Converge is how long the change took to show in where requests land.
	Converge time.Duration
	// During counts the requests sent while converging.
	During Tally
}

// Report collects the rows of every scenario.
type Report struct {
	mu   sync.Mutex
	rows []Row
}

// Add records a row.
func (r *Report) Add(row Row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, row)
}

// Table renders the rows.
func (r *Report) Table(mode string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	rows := append([]Row(nil), r.rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Scenario < rows[j].Scenario })
	var b strings.Builder
	fmt.Fprintf(&b, "\ne2e summary, kube-proxy %s\n", mode)
	fmt.Fprintf(&b, "| %-28s | %-44s | %-14s | %-8s | %-11s | %-18s |\n", "scenario", "step", "failed/total", "slow>1s", "converged in", "while converging")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %-28s | %-44s | %7d/%-6d | %8d | %11s | %7d/%-10d |\n", row.Scenario, row.Step,
			row.Measured.Failed, row.Measured.Total, row.Measured.Slow, row.Converge.Round(10*time.Millisecond), row.During.Failed, row.During.Total)
	}
	return b.String()
}
