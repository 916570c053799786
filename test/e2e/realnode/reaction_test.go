package realnode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/netns"
)

// The same health check for both paths: GET /healthz every second, two
// failures take a pod out, one success brings it back.
const (
	checkPeriod   = time.Second
	checkFailures = 2
)

// sideBySide is one workload behind two Services: "builtin", a plain
// Service whose endpoints follow the pods' Ready condition (kubelet's
// readiness probes, kube-controller-manager's EndpointSlice controller), and
// "swh", a ServiceWithHealthchecks probing the same port the same way. Each
// pod has two containers: web (8080, probed by both paths) and side (8081,
// with a readiness probe of its own that only the pod's Ready condition
// sees).
type sideBySide struct {
	ns           string
	pods         []corev1.Pod
	builtin, swh string // ClusterIPs
}

func startSideBySide(ctx context.Context, t testing.TB) *sideBySide {
	t.Helper()
	ns := testNamespace(t)
	d := workload(ns, "pair", 3)
	probe := func(port int32) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: int32(checkPeriod / time.Second), FailureThreshold: checkFailures, SuccessThreshold: 1, TimeoutSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}}}
	}
	web := &d.Spec.Template.Spec.Containers[0]
	web.ReadinessProbe = probe(8080)
	side := *web.DeepCopy()
	side.Name, side.Args, side.Ports, side.ReadinessProbe = "side", []string{"-http=:8081"}, nil, probe(8081)
	d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, side)
	if err := cluster.CP.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	s := &sideBySide{ns: ns}
	s.pods = waitAvailable(ctx, t, ns, "pair", 3)
	builtin := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "builtin"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "pair"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := cluster.CP.Client.Create(ctx, builtin); err != nil {
		t.Fatal(err)
	}
	s.builtin = builtin.Spec.ClusterIP
	s.swh = resource(ctx, t, ns, "swh", "pair").Spec.ClusterIP
	waitReadyPods(ctx, t, ns, "swh", s.pods)
	waitReadyPods(ctx, t, ns, "builtin", s.pods)
	if err := cluster.WaitProgrammed(ctx, s.builtin); err != nil {
		t.Fatal(err)
	}
	return s
}

// control switches one port of a pod into or out of failing (the
// workload's POST /fail and /recover).
func control(ctx context.Context, pod corev1.Pod, port int, verb string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s:%d/%s", pod.Status.PodIP, port, verb), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, pod.Name, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: status %d", verb, pod.Name, resp.StatusCode)
	}
	return nil
}

// landings records when requests to a ClusterIP landed on which pod, from
// a few concurrent senders in a client namespace.
type landings struct {
	mu   sync.Mutex
	last map[string]time.Time
	// fails counts requests that got no answer.
	fails, total int
	stop         context.CancelFunc
	wg           sync.WaitGroup
}

func sendTo(ctx context.Context, from *netns.Namespace, ip string, senders int) *landings {
	ctx, cancel := context.WithCancel(ctx)
	l := &landings{last: map[string]time.Time{}, stop: cancel}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: from.DialContext, DisableKeepAlives: true}}
	for range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				pod := get(ctx, client, "http://"+ip+"/")
				now := time.Now()
				if ctx.Err() != nil {
					return // cut short by end, not failed
				}
				l.mu.Lock()
				l.total++
				if pod == "" {
					l.fails++
				} else {
					l.last[pod] = now
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// get returns the pod that answered (the body's first word; a failing
// pod answers 503 "<pod> failing"), or "" when none did.
func get(ctx context.Context, c *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := c.Do(req)
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	f := strings.Fields(string(body))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (l *landings) lastOn(pod string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last[pod]
}

func (l *landings) end() {
	l.stop()
	l.wg.Wait()
}

// BenchmarkFailureReaction (make bench-datapath): one pod's web port
// starts failing its health check; the time until kube-proxy stops sending
// it requests, through the built-in path (kubelet readiness probe → pod
// status → EndpointSlice controller → kube-proxy) and through ours (agent
// probe → slice → kube-proxy), measured side by side on the same pod and
// the same failure, from a client on another node. Each iteration fails
// the next pod, waits until both paths stopped sending to it, then heals
// it and waits until both send to it again.
func BenchmarkFailureReaction(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := startSideBySide(ctx, b)
	// From the failure, and from the probe result that flipped the
	// verdict (the checkFailures-th failed check each prober made).
	var builtin, ours, builtinAfter, oursAfter []time.Duration
	// From the verdict to the slice change a watch sees.
	var builtinSlice, oursSlice []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		victim := s.pods[i%len(s.pods)]
		from := clientOffNode(victim.Spec.NodeName)
		lb, ls := sendTo(ctx, from, s.builtin, 4), sendTo(ctx, from, s.swh, 4)
		wb, ws := watchWithdrawals(ctx, b, s.ns, "builtin"), watchWithdrawals(ctx, b, s.ns, "swh")
		time.Sleep(300 * time.Millisecond) // both loops land everywhere first
		failed := time.Now()
		if err := control(ctx, victim, 8080, "fail"); err != nil {
			b.Fatal(err)
		}
		// Stopped: nothing landed on the victim for a whole period after
		// the threshold could have passed.
		harness.Eventually(b, time.Minute, "both paths to stop sending to "+victim.Name, func() error {
			for name, l := range map[string]*landings{"builtin": lb, "swh": ls} {
				last := l.lastOn(victim.Name)
				if time.Since(last) < 2*checkPeriod {
					return fmt.Errorf("%s still sent to %s %s ago", name, victim.Name, time.Since(last).Round(time.Millisecond))
				}
			}
			return nil
		})
		lb.end()
		ls.end()
		verdicts, err := verdictTimes(ctx, victim, failed)
		if err != nil {
			b.Fatal(err)
		}
		builtin = append(builtin, lb.lastOn(victim.Name).Sub(failed))
		ours = append(ours, ls.lastOn(victim.Name).Sub(failed))
		builtinAfter = append(builtinAfter, lb.lastOn(victim.Name).Sub(verdicts["kube-probe"]))
		oursAfter = append(oursAfter, ls.lastOn(victim.Name).Sub(verdicts["swh-probe"]))
		for _, w := range []*withdrawals{wb, ws} {
			if _, err := w.stop(); err != nil {
				b.Fatal(err)
			}
		}
		builtinSlice = append(builtinSlice, wb.firstWithdrawal(victim.Status.PodIP).Sub(verdicts["kube-probe"]))
		oursSlice = append(oursSlice, ws.firstWithdrawal(victim.Status.PodIP).Sub(verdicts["swh-probe"]))
		if err := control(ctx, victim, 8080, "recover"); err != nil {
			b.Fatal(err)
		}
		waitReadyPods(ctx, b, s.ns, "swh", s.pods)
		waitReadyPods(ctx, b, s.ns, "builtin", s.pods)
	}
	b.StopTimer()
	bp50, bmax := percentile(builtin, 50), percentile(builtin, 100)
	sp50, smax := percentile(ours, 50), percentile(ours, 100)
	bv50, bvmax := percentile(builtinAfter, 50), percentile(builtinAfter, 100)
	sv50, svmax := percentile(oursAfter, 50), percentile(oursAfter, 100)
	b.ReportMetric(ms(bp50), "builtin-p50-ms")
	b.ReportMetric(ms(sp50), "swh-p50-ms")
	b.ReportMetric(ms(bv50), "builtin-after-verdict-p50-ms")
	b.ReportMetric(ms(sv50), "swh-after-verdict-p50-ms")
	if bv50 > 0 {
		b.ReportMetric(float64(sv50)/float64(bv50), "after-verdict-ratio")
	}
	bs50, bsmax := percentile(builtinSlice, 50), percentile(builtinSlice, 100)
	ss50, ssmax := percentile(oursSlice, 50), percentile(oursSlice, 100)
	b.ReportMetric(ms(bs50), "builtin-verdict-to-slice-p50-ms")
	b.ReportMetric(ms(ss50), "swh-verdict-to-slice-p50-ms")
	b.Logf("%d failures, one pod at a time, client on another node; %s period, %d failures\n"+
		"  failure → kube-proxy stops sending:         built-in p50 %s max %s | swh p50 %s max %s\n"+
		"  failing verdict → kube-proxy stops sending: built-in p50 %s max %s | swh p50 %s max %s | ratio of p50s %.2f (goal ≤ 0.5)\n"+
		"  failing verdict → slice change (watch):     built-in p50 %s max %s | swh p50 %s max %s | ratio of p50s %.2f\n"+
		"  all (failure, verdict, slice): built-in %v %v %v; swh %v %v %v",
		len(ours), checkPeriod, checkFailures, bp50, bmax, sp50, smax, bv50, bvmax, sv50, svmax, float64(sv50)/float64(bv50),
		bs50, bsmax, ss50, ssmax, float64(ss50)/float64(bs50),
		builtin, builtinAfter, builtinSlice, ours, oursAfter, oursSlice)
}

// verdictTimes reads the victim's web port check log and returns, per
// prober (kube-probe, swh-probe), when it made its checkFailures-th failed
// check after failed: the result that flipped its verdict.
func verdictTimes(ctx context.Context, victim corev1.Pod, failed time.Time) (map[string]time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:8080/checks", victim.Status.PodIP), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the checks of %s: %w", victim.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	out := map[string]time.Time{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var nanos int64
		var status int
		var agent string
		if _, err := fmt.Sscanf(line, "%d %d %q", &nanos, &status, &agent); err != nil {
			return nil, fmt.Errorf("check log line %q: %w", line, err)
		}
		at := time.Unix(0, nanos)
		prober, _, _ := strings.Cut(agent, "/")
		if at.Before(failed) || status == http.StatusOK {
			continue
		}
		counts[prober]++
		if counts[prober] == checkFailures {
			out[prober] = at
		}
	}
	for _, p := range []string{"kube-probe", "swh-probe"} {
		if out[p].IsZero() {
			return nil, fmt.Errorf("%s: no %d failed checks by %s after the failure in:\n%s", victim.Name, checkFailures, p, body)
		}
	}
	return out, nil
}

func clientOffNode(node string) *netns.Namespace {
	for _, n := range cluster.Nodes {
		if n.Name != node {
			return n.Client.NS
		}
	}
	return nil
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[min(i, len(s)-1)].Round(time.Millisecond)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TestUnrelatedContainerFailure (scenario 6, second half): a pod's side
// container fails its readiness probe. The pod turns NotReady, so the
// built-in path withdraws it from every Service, including the one for the
// healthy web port; ours probes the web port and keeps serving it.
func TestUnrelatedContainerFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startSideBySide(ctx, t)
	victim := s.pods[0]
	if err := control(ctx, victim, 8081, "fail"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = control(context.Background(), victim, 8081, "recover") }()
	start := time.Now()
	harness.Eventually(t, convergeTimeout, "the built-in path to withdraw "+victim.Name, func() error {
		got, err := readyEndpoints(ctx, s.ns, "builtin")
		if err != nil {
			return err
		}
		if _, ok := got[victim.Status.PodIP]; ok {
			return fmt.Errorf("still ready: %v", got)
		}
		return nil
	})
	withdrawn := time.Since(start)
	// kube-proxy applies the withdrawal within its sync period (100 ms
	// here); 2 s of slack on a busy machine, then 3 s of requests through
	// both Services.
	time.Sleep(2 * time.Second)
	from := clientOffNode(victim.Spec.NodeName)
	sent := time.Now()
	lb, ls := sendTo(ctx, from, s.builtin, 2), sendTo(ctx, from, s.swh, 2)
	time.Sleep(3 * time.Second)
	lb.end()
	ls.end()
	var p corev1.Pod
	if err := cluster.CP.Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: victim.Name}, &p); err != nil {
		t.Fatal(err)
	}
	if podReady(&p) {
		t.Fatalf("%s is still Ready with its side container failing", victim.Name)
	}
	if !ls.lastOn(victim.Name).After(sent) || ls.fails > 0 {
		t.Fatalf("ours stopped sending to %s, whose web port is healthy (last %v, %d/%d failed)", victim.Name, ls.lastOn(victim.Name), ls.fails, ls.total)
	}
	if last := lb.lastOn(victim.Name); !last.IsZero() {
		t.Fatalf("the built-in path still sent to %s %s after it withdrew it", victim.Name, last.Sub(start).Round(time.Millisecond))
	}
	if lb.total == 0 || lb.fails > 0 {
		t.Fatalf("the built-in Service: %d/%d requests failed", lb.fails, lb.total)
	}
	t.Logf("SCENARIO 6 unrelated container: the built-in Service withdrew %s after %s (pod NotReady); ours kept sending to it (%d requests, %d failed)",
		victim.Name, withdrawn.Round(100*time.Millisecond), ls.total, ls.fails)
}
