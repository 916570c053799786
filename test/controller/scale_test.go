package controller_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/harness"
)

// BenchmarkControllerScale creates 1,000 resources at once and measures how
// long the swh-controller binary takes until every child Service exists and
// every status has settled, and the controller's peak memory (VmHWM). Run
// it with `make bench-controller`; it needs bin/swh-controller.
func BenchmarkControllerScale(b *testing.B) {
	resources := 1000
	if n, err := strconv.Atoi(os.Getenv("SWH_SCALE_RESOURCES")); err == nil && n > 0 {
		resources = n
	}
	binDir, err := harness.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(binDir, "swh-controller")
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("%s not built (make build): %v", bin, err)
	}
	for range b.N {
		ctx := context.Background()
		ns := fmt.Sprintf("scale-%d", time.Now().UnixNano())
		if err := harness.EnsureNamespace(ctx, controlPlane.Client, ns); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level="+cmp.Or(os.Getenv("SWH_SCALE_LOG_LEVEL"), "error"))
		cmd.Env = append(os.Environ(), "KUBECONFIG="+controlPlane.Kubeconfig)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, resources)
		work := make(chan int)
		for range 16 {
			wg.Go(func() {
				for i := range work {
					if err := controlPlane.Client.Create(ctx, newResource(ns, fmt.Sprintf("r%04d", i))); err != nil {
						errs <- err
					}
				}
			})
		}
		for i := range resources {
			work <- i
		}
		close(work)
		wg.Wait()
		created := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		settled := 0
		for settled < resources {
			list := &swhv1alpha1.ServiceWithHealthchecksList{}
			if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
			settled = 0
			for _, r := range list.Items {
				if r.Status.ClusterIP != "" && r.Status.ObservedGeneration == r.Generation && r.Status.Ready != "" {
					settled++
				}
			}
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("only %d of %d settled after 10 minutes", settled, resources)
			}
			time.Sleep(250 * time.Millisecond)
		}
		elapsed := time.Since(start)
		peak := peakRSS(b, cmd.Process.Pid)
		b.ReportMetric(elapsed.Seconds(), "s-to-settle")
		b.ReportMetric(float64(peak)/1024, "MiB-peak-rss")
		fmt.Printf("controller scale: %d resources created in %v, all Services and statuses settled after %v; controller peak RSS %.1f MiB\n",
			resources, created.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(peak)/1024)
	}
}

// peakRSS returns VmHWM of a process in KiB.
func peakRSS(b *testing.B, pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return kb
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
