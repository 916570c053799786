package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/process"
)

// agentProcess is the swh-agent binary running for one node.
type agentProcess struct{ *process.Proc }

// startAgentProcess starts bin/swh-agent for node; args come after the
// defaults (no metrics, no health endpoints, errors only) and override them.
func startAgentProcess(b *testing.B, node string, args ...string) *agentProcess {
	binDir, err := harness.BinDir()
	if err != nil {
		b.Fatal(err)
	}
	proc, err := process.Start(process.Spec{
		Name: "swh-agent of " + node, Path: filepath.Join(binDir, "swh-agent"), Output: os.Stderr, DiesWithSuite: true,
		Args: append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=error"}, args...),
		Env:  []string{"KUBECONFIG=" + controlPlane.Kubeconfig, "NODE_NAME=" + node},
	})
	if err != nil {
		b.Fatalf("%v (make build)", err)
	}
	p := &agentProcess{proc}
	b.Cleanup(p.stop)
	return p
}

// stop kills the agent: the benchmark measures it, not its shutdown.
func (p *agentProcess) stop() { p.Kill() }

// cpuSeconds is the process's user+system CPU time.
func (p *agentProcess) cpuSeconds(b *testing.B) float64 {
	return processCPU(b, p.PID, false)
}

// memoryKiB returns VmHWM (peak) and VmRSS.
func (p *agentProcess) memoryKiB(b *testing.B) (peak, now int) {
	kib, err := harness.ProcessMemoryKiB(p.PID, "VmHWM", "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	return kib[0], kib[1]
}

// BenchmarkAgentFootprint runs the agent binary for a node with 110 pods x 3
// probes at a 1 s period and reports its CPU and memory, first with no other
// pod in the cluster, then with 5,000 pods on other nodes (the agent must
// not cache them). Run it with `make bench-agent`.
func BenchmarkAgentFootprint(b *testing.B) {
	const pods, foreign = 110, 5000
	const window = 15 * time.Second
	ctx := context.Background()
	fast := *controlPlane.Config
	fast.QPS, fast.Burst = 1000, 2000
	c, err := client.New(&fast, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		ns := controlPlane.TestNamespace(b)
		for i := range pods {
			be := startBackend(b, ns, "foot", fmt.Sprintf("foot-%03d", i), nodeA)
			health, err := harness.StartTCPServer(be.ip + ":8081")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = health.Stop() })
		}
		swh := resource(ns, "foot", webAndSMTP,
			fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)),
			fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromString("smtp")),
			fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(8081)))
		if err := c.Create(ctx, swh); err != nil {
			b.Fatal(err)
		}
		measure := func(label string) (cpu float64, peak, rss int) {
			agent := startAgentProcess(b, nodeA)
			waitReady(ctx, b, ns, "foot", func(m map[string]bool) bool { return len(m) == pods })
			time.Sleep(2 * time.Second) // past the start-up burst
			before := agent.cpuSeconds(b)
			time.Sleep(window)
			cpu = (agent.cpuSeconds(b) - before) / window.Seconds()
			peak, rss = agent.memoryKiB(b)
			agent.stop()
			fmt.Printf("  %-28s CPU %.3f cores, peak RSS %.1f MiB, RSS %.1f MiB\n", label, cpu, float64(peak)/1024, float64(rss)/1024)
			return cpu, peak, rss
		}
		fmt.Printf("agent footprint: %d pods x 3 probes at 1 s on its node (%d probes/s), measured over %v:\n", pods, pods*3, window)
		_, peak0, _ := measure("0 pods on other nodes:")

		// 5,000 pods on other nodes, selected by the resource too: only the
		// agent's field selector keeps them out of its memory.
		work := make(chan int)
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for i := range work {
					pod := &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("other-%05d", i), Labels: map[string]string{"app": "foot"}},
						Spec: corev1.PodSpec{NodeName: fmt.Sprintf("elsewhere-%02d", i%50), AutomountServiceAccountToken: new(false),
							Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
					}
					if err := c.Create(ctx, pod); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := range foreign {
			work <- i
		}
		close(work)
		wg.Wait()
		_, peak1, _ := measure(fmt.Sprintf("%d pods on other nodes:", foreign))
		fmt.Printf("  peak memory with %d foreign pods / without: %.2f\n", foreign, float64(peak1)/float64(peak0))
		b.ReportMetric(float64(peak1)/float64(peak0), "peak-mem-ratio-5000-foreign/0")
	}
}
