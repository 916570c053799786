package realnode_test

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/harness"
)

// passAfter is how long a catching-up workload's probed port fails after
// its container started (swh-workload -pass-after), while its TCP port is
// open and kubelet calls it Ready at once: the Kafka broker of seed 004.
const passAfter = 20 * time.Second

// catchingUp is a Deployment of three workload pods, one per node, Ready
// as soon as their port opens (a TCP readiness probe) but passing GET
// /healthz only passAfter later, that keep serving 3 s after SIGTERM (so
// that a pod's own termination fails no request).
func catchingUp(ns, name string) *appsv1.Deployment {
	d := workload(ns, name, 3)
	// A cordoned node keeps its taint out of the spread: the replacement
	// of a drained node's pod goes to another node.
	d.Spec.Template.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
	c := &d.Spec.Template.Spec.Containers[0]
	c.Args = []string{"-http=:8080", "-pass-after=" + passAfter.String()}
	c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/swh", "sleep", "3s"}}}}
	return d
}

// TestDrainGuarded (scenario 7): a resource with a disruption budget
// (maxUnavailable 1 on its port) over three catching-up pods, one per node.
// Node A is drained, then at once node B, with kubectl's drain library,
// under traffic. A's pod goes (the budget allows one); its replacement is
// Ready at once but passes only 20 s later, and until then the guard
// answers B's evictions 429 and the drain retries every 5 s, where a
// PodDisruptionBudget, counting Ready pods, would have let it through. B's
// drain ends only once the replacement passes; no request fails.
func TestDrainGuarded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ns := testNamespace(t)
	const name = "ledger"
	d := catchingUp(ns, name)
	if err := cluster.CP.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	pods := waitAvailable(ctx, t, ns, name, 3)
	svc := resource(ctx, t, ns, name, name, func(r *swhv1alpha1.ServiceWithHealthchecks) {
		r.Spec.DisruptionBudget = &swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"http"}}
	})
	waitReadyPods(ctx, t, ns, name, pods)
	waitBudget(ctx, t, ns, name, 3, 1)

	a := pods[0].Spec.NodeName
	drained := []string{a}
	t.Cleanup(func() { uncordon(t, drained...) })
	original := map[string]bool{}
	for _, p := range pods {
		original[p.Name] = true
	}
	passed := watchReplacement(ctx, ns, name, original)
	ls := startLoops(ctx, "http://"+svc.Spec.ClusterIP+"/")

	drainA := newDrainer(ctx, t)
	start := time.Now()
	if err := drainA.drain(a); err != nil {
		ls.stop()
		t.Fatalf("draining %s: %v\n%s", a, err, drainA.output())
	}
	tookA := time.Since(start)
	// B is a node whose pod is one of the original three, not the node
	// A's replacement went to: that one, not passing yet, the guard would
	// let go at once (it is not available, and the budget is met without
	// it).
	victim := otherOriginal(ctx, t, ns, name, pods, a)
	b := victim.Spec.NodeName
	drained = append(drained, b)
	readyAtB := readyPods(ctx, t, ns, name)
	drainB := newDrainer(ctx, t)
	startB := time.Now()
	errB := drainB.drain(b)
	tookB := time.Since(startB)
	time.Sleep(2 * time.Second) // traffic after B's pod is gone too
	tally := ls.stop()
	passedAt := passed.stop()
	t.Logf("drain of %s (%s):\n%s", a, tookA.Round(100*time.Millisecond), drainA.output())
	t.Logf("drain of %s (%s):\n%s", b, tookB.Round(100*time.Millisecond), drainB.output())
	if errB != nil {
		t.Fatalf("draining %s: %v", b, errB)
	}

	// B's pod was refused, with our message, and let go only after A's
	// replacement passed its probes.
	retries := drainB.retries(victim.Name, "ServiceWithHealthchecks "+ns+"/"+name)
	if retries == 0 {
		t.Errorf("the drain of %s was never told to retry the eviction of %s by the guard of %s/%s", b, victim.Name, ns, name)
	}
	evicted := drainB.lastAttempt(victim.Name)
	if passedAt.IsZero() {
		t.Errorf("no replacement pod of %s was ever published passing", name)
	} else if evicted.Before(passedAt.Add(-time.Second)) {
		t.Errorf("%s was evicted at %s, before the replacement passed its probes at %s",
			victim.Name, evicted.Format("15:04:05.000"), passedAt.Format("15:04:05.000"))
	}
	// The chart's own pods are never the guard's to hold.
	for _, line := range strings.Split(drainA.output()+drainB.output(), "\n") {
		if strings.Contains(line, `-n "`+realnode.ChartNamespace+`"`) && strings.Contains(line, "eviction-guard") {
			t.Errorf("the guard answered an eviction in %s: %s", realnode.ChartNamespace, line)
		}
	}
	if tally.Failed > 0 {
		t.Errorf("during the drains: %s", tally)
	}
	waited := time.Duration(0)
	if !evicted.IsZero() {
		waited = evicted.Sub(startB)
	}
	t.Logf("FIGURE drain-wait=%s drain-b=%s drain-a=%s retries=%d replacement-passed-after-b-start=%s ready-at-b-start=%d/3 (a PodDisruptionBudget maxUnavailable 1 would have allowed %d)",
		waited.Round(100*time.Millisecond), tookB.Round(100*time.Millisecond), tookA.Round(100*time.Millisecond), retries,
		passedAt.Sub(startB).Round(100*time.Millisecond), readyAtB, max(0, readyAtB-2))
	report(t, "7 guarded drains", tally, fmt.Sprintf("drain %s %s, then drain %s %s of which %s held by the guard (%d retries)",
		a, tookA.Round(100*time.Millisecond), b, tookB.Round(100*time.Millisecond), waited.Round(100*time.Millisecond), retries))
}

// otherOriginal waits until the replacement of the pod drained off node a
// is scheduled and returns an original pod on neither node.
func otherOriginal(ctx context.Context, t testing.TB, ns, app string, original []corev1.Pod, a string) corev1.Pod {
	t.Helper()
	var victim corev1.Pod
	harness.Eventually(t, convergeTimeout, "the replacement of "+app+"'s pod on "+a+" scheduled", func() error {
		var pods corev1.PodList
		if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
			return err
		}
		taken := map[string]bool{a: true}
		scheduled := false
		for _, p := range pods.Items {
			if !slices.ContainsFunc(original, func(o corev1.Pod) bool { return o.Name == p.Name }) && p.Spec.NodeName != "" {
				taken[p.Spec.NodeName], scheduled = true, true
			}
		}
		if !scheduled {
			return fmt.Errorf("no replacement scheduled among %d pods", len(pods.Items))
		}
		for _, p := range original {
			if !taken[p.Spec.NodeName] {
				victim = p
				return nil
			}
		}
		return fmt.Errorf("every node is taken: %v", taken)
	})
	return victim
}

// waitBudget waits until the controller's status of the resource counts
// healthy pods passing and allows allowed disruptions.
func waitBudget(ctx context.Context, t testing.TB, ns, name string, healthy, allowed int32) {
	t.Helper()
	harness.Eventually(t, convergeTimeout, fmt.Sprintf("%s's budget counting %d healthy, %d disruptions allowed", name, healthy, allowed), func() error {
		var r swhv1alpha1.ServiceWithHealthchecks
		if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
			return err
		}
		if st := r.Status.Disruption; st == nil || st.CurrentHealthy != healthy || st.DisruptionsAllowed != allowed {
			return fmt.Errorf("status.disruption %+v", st)
		}
		return nil
	})
}

// readyPods counts the app's pods whose Ready condition is True.
func readyPods(ctx context.Context, t testing.TB, ns, app string) int {
	t.Helper()
	var pods corev1.PodList
	if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil && podReady(&pods.Items[i]) {
			n++
		}
	}
	return n
}

// replacement records when a pod not among the original ones is first
// published ready.
type replacement struct {
	cancel context.CancelFunc
	done   chan struct{}
	at     time.Time
}

func watchReplacement(ctx context.Context, ns, name string, original map[string]bool) *replacement {
	ctx, cancel := context.WithCancel(ctx)
	r := &replacement{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			if ready, err := readyEndpoints(ctx, ns, name); err == nil {
				for _, pod := range ready {
					if pod != "" && !original[pod] {
						r.at = time.Now()
						return
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return r
}

// stop returns when the first replacement passed (zero when none did).
func (r *replacement) stop() time.Time {
	r.cancel()
	<-r.done
	return r.at
}

// drainer drains nodes as kubectl drain does (cordon, then evict every
// pod but DaemonSets', retrying a 429 every 5 s), and keeps its output and
// when each eviction was last attempted.
type drainer struct {
	helper *drain.Helper
	out    harness.Buffer
	mu     sync.Mutex
	last   map[string]time.Time
}

func newDrainer(ctx context.Context, t testing.TB) *drainer {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.CP.Config)
	if err != nil {
		t.Fatal(err)
	}
	d := &drainer{last: map[string]time.Time{}}
	d.helper = &drain.Helper{
		Ctx: ctx, Client: cs,
		// kubectl drain's defaults, and the flags a node upgrade passes.
		GracePeriodSeconds: -1, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		Timeout: 4 * time.Minute, EvictErrorRetryDelay: 5 * time.Second,
		Out: timestamped(&d.out), ErrOut: timestamped(&d.out),
		OnPodDeletionOrEvictionStarted: func(pod *corev1.Pod, _ bool) {
			d.mu.Lock()
			d.last[pod.Name] = time.Now()
			d.mu.Unlock()
		},
	}
	return d
}

func (d *drainer) drain(node string) error {
	if err := drain.RunCordonOrUncordon(d.helper, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, true); err != nil {
		return fmt.Errorf("cordoning: %w", err)
	}
	return drain.RunNodeDrain(d.helper, node)
}

func (d *drainer) output() string { return d.out.String() }

// retries counts the drain's "will retry" lines for pod whose message
// holds want.
func (d *drainer) retries(pod, want string) int {
	re := regexp.MustCompile(`error when evicting pods/"` + regexp.QuoteMeta(pod) + `" .*\(will retry after 5s\): `)
	n := 0
	for _, line := range strings.Split(d.output(), "\n") {
		if re.MatchString(line) && strings.Contains(line, want) {
			n++
		}
	}
	return n
}

// lastAttempt is when the drain last tried to evict pod: the attempt that
// went through.
func (d *drainer) lastAttempt(pod string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last[pod]
}

// timestamped prefixes every write (the drain prints whole lines) with the
// time.
func timestamped(w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if _, err := fmt.Fprintf(w, "%s %s", time.Now().Format("15:04:05.000"), p); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// uncordon makes the nodes schedulable again, then spreads the
// controller's replicas again if the drains left both on one node: a later
// scenario that powers a node off must not take both at once.
func uncordon(t testing.TB, nodes ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cluster.CP.Config)
	if err != nil {
		t.Error(err)
		return
	}
	h := &drain.Helper{Ctx: ctx, Client: cs, Out: io.Discard, ErrOut: io.Discard}
	for _, n := range nodes {
		if err := drain.RunCordonOrUncordon(h, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, false); err != nil {
			t.Errorf("uncordoning %s: %v", n, err)
		}
	}
	settle(t)
	var pods corev1.PodList
	if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(realnode.ChartNamespace), client.MatchingLabels{"app.kubernetes.io/component": "controller"}); err != nil {
		t.Error(err)
		return
	}
	seen := map[string]bool{}
	for _, p := range pods.Items {
		if seen[p.Spec.NodeName] {
			// Deleted, not evicted: the PodDisruptionBudget would refuse
			// while the other replica is the only one Ready. The new one
			// prefers a node without a replica.
			if err := cluster.CP.Client.Delete(ctx, &p); err != nil {
				t.Errorf("deleting %s to spread the controller: %v", p.Name, err)
			}
			t.Logf("the drains left both controller replicas on %s: %s deleted to spread them again", p.Spec.NodeName, p.Name)
			harness.Eventually(t, 2*time.Minute, "two Ready controller replicas without "+p.Name, func() error {
				var now corev1.PodList
				if err := cluster.CP.Client.List(ctx, &now, client.InNamespace(realnode.ChartNamespace), client.MatchingLabels{"app.kubernetes.io/component": "controller"}); err != nil {
					return err
				}
				ready := 0
				for i := range now.Items {
					if now.Items[i].Name == p.Name {
						return fmt.Errorf("%s still there", p.Name)
					}
					if podReady(&now.Items[i]) {
						ready++
					}
				}
				if ready != 2 {
					return fmt.Errorf("%d Ready replicas", ready)
				}
				return nil
			})
			return
		}
		seen[p.Spec.NodeName] = true
	}
}
