package realnode_test

import (
	"context"
	"fmt"
	"io"
	"net"
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

// landings records, per pod, when the last request that landed on it was
// sent, from a few concurrent senders in a client namespace. A request
// is a new connection: kube-proxy's rules choose its pod when its SYN
// leaves, so the time it was sent is when they still chose that pod. With
// a redial time, a connection not set up by then is given up (a failed
// request) and the sender sends again: a dropped SYN, retransmitted a
// second later to the pod chosen for the first, would otherwise hide what
// the rules choose meanwhile.
type landings struct {
	mu   sync.Mutex
	last map[string]time.Time
	// fails counts requests that got no answer.
	fails, total int
	stop         context.CancelFunc
	wg           sync.WaitGroup
}

func sendTo(ctx context.Context, from *netns.Namespace, ip string, senders int, redial time.Duration) *landings {
	ctx, cancel := context.WithCancel(ctx)
	l := &landings{last: map[string]time.Time{}, stop: cancel}
	dial := from.DialContext
	if redial > 0 {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, redial)
			defer cancel()
			return from.DialContext(ctx, network, addr)
		}
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	for range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				sent := time.Now()
				pod := get(ctx, client, "http://"+ip+"/")
				if ctx.Err() != nil {
					return // cut short by end, not failed
				}
				l.mu.Lock()
				l.total++
				if pod == "" {
					l.fails++
				} else if sent.After(l.last[pod]) {
					l.last[pod] = sent
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
// probe → slice → kube-proxy), measured on the same pods in one run, from
// a client on another node.
//
// Each iteration fails the next pod twice, once per path, in alternating
// order: the port fails only the checks of that path's prober (the
// workload's POST /fail?for=), the client sends only to that path's
// ClusterIP, and the next measurement starts once the pod is back in both
// paths and the client reaches it again. Failing both at once would make
// the two slice changes meet in the nodes' kube-proxy, whose minimum sync
// period (100 ms here) then delays whichever comes second: a cost of
// measuring them together that neither path has alone.
//
// Then (but in the framework's first, one-iteration call) the agents are
// upgraded to --coalesce-whole-window, the behaviour before a complete
// round ended the coalescing window, and ours is measured again as many
// times; the agents are upgraded back at the end.
func BenchmarkFailureReaction(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := startSideBySide(ctx, b)
	paths := []reactionPath{
		{service: "builtin", ip: s.builtin, prober: "kube-probe"},
		{service: "swh", ip: s.swh, prober: "swh-probe"},
	}
	results := map[string]*reactionTimes{"builtin": {}, "swh": {}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		victim := s.pods[i%len(s.pods)]
		order := []reactionPath{paths[i%2], paths[1-i%2]}
		for _, p := range order {
			results[p.service].add(measureReaction(ctx, b, s, victim, p))
		}
	}
	window := &reactionTimes{}
	if b.N > 1 {
		b.Cleanup(func() {
			if out, err := cluster.InstallChart(context.Background(), true); err != nil {
				b.Errorf("upgrading the agents back to the defaults: %v\n%s", err, out)
			}
		})
		if out, err := cluster.InstallChart(ctx, true, "agent.extraArgs={--coalesce-whole-window}"); err != nil {
			b.Fatalf("upgrading the agents to --coalesce-whole-window: %v\n%s", err, out)
		}
		waitReadyPods(ctx, b, s.ns, "swh", s.pods)
		for i := 0; i < b.N; i++ {
			window.add(measureReaction(ctx, b, s, s.pods[i%len(s.pods)], paths[1]))
		}
	}
	b.StopTimer()
	builtin, ours := results["builtin"], results["swh"]
	bp50, bmax := percentile(builtin.failure, 50), percentile(builtin.failure, 100)
	sp50, smax := percentile(ours.failure, 50), percentile(ours.failure, 100)
	bv50, bvmax := percentile(builtin.verdict, 50), percentile(builtin.verdict, 100)
	sv50, svmax := percentile(ours.verdict, 50), percentile(ours.verdict, 100)
	b.ReportMetric(ms(bp50), "builtin-p50-ms")
	b.ReportMetric(ms(sp50), "swh-p50-ms")
	b.ReportMetric(ms(bv50), "builtin-after-verdict-p50-ms")
	b.ReportMetric(ms(sv50), "swh-after-verdict-p50-ms")
	if bv50 > 0 {
		b.ReportMetric(float64(sv50)/float64(bv50), "after-verdict-ratio")
	}
	bs50, bsmax := percentile(builtin.slice, 50), percentile(builtin.slice, 100)
	ss50, ssmax := percentile(ours.slice, 50), percentile(ours.slice, 100)
	b.ReportMetric(ms(bs50), "builtin-verdict-to-slice-p50-ms")
	b.ReportMetric(ms(ss50), "swh-verdict-to-slice-p50-ms")
	if b.N == 1 {
		return // the framework's first call: its figures are the next call's too, and the log keeps 10 lines
	}
	b.Logf("%d failures per path, one pod and one path at a time, client on another node; %s period, %d failures\n"+
		"  failure → kube-proxy stops sending:         built-in p50 %s max %s | swh p50 %s max %s\n"+
		"  failing verdict → kube-proxy stops sending: built-in p50 %s max %s | swh p50 %s max %s | ratio of p50s %.2f (goal ≤ 0.5)\n"+
		"  failing verdict → slice change (watch):     built-in p50 %s max %s | swh p50 %s max %s | ratio of p50s %.2f\n"+
		"  all (failure, verdict, slice): built-in %v %v %v; swh %v %v %v",
		len(ours.failure), checkPeriod, checkFailures, bp50, bmax, sp50, smax, bv50, bvmax, sv50, svmax, float64(sv50)/float64(bv50),
		bs50, bsmax, ss50, ssmax, float64(ss50)/float64(bs50),
		builtin.failure, builtin.verdict, builtin.slice, ours.failure, ours.verdict, ours.slice)
	if len(window.verdict) > 0 {
		wv50, wvmax := percentile(window.verdict, 50), percentile(window.verdict, 100)
		ws50, wsmax := percentile(window.slice, 50), percentile(window.slice, 100)
		b.ReportMetric(ms(wv50), "swh-whole-window-after-verdict-p50-ms")
		if bv50 > 0 {
			b.ReportMetric(float64(wv50)/float64(bv50), "whole-window-after-verdict-ratio")
		}
		b.Logf("then %d failures with agents run with --coalesce-whole-window (before rounds):\n"+
			"  failing verdict → kube-proxy stops sending: swh p50 %s max %s | ratio to the built-in p50 above %.2f\n"+
			"  failing verdict → slice change (watch):     swh p50 %s max %s\n"+
			"  all (failure, verdict, slice): %v %v %v",
			len(window.verdict), wv50, wvmax, float64(wv50)/float64(bv50), ws50, wsmax, window.failure, window.verdict, window.slice)
	}
}

// reactionPath is one of the two ways to a pod: a Service and the prober
// whose checks decide its endpoints.
type reactionPath struct {
	service, ip, prober string
}

// reactionTimes are a path's measurements: from the failure, and from the
// probe result that flipped the verdict (the checkFailures-th failed check
// of the path's prober), to the last request that landed on the pod; and
// from the verdict to the slice change a watch saw.
type reactionTimes struct {
	failure, verdict, slice []time.Duration
}

func (r *reactionTimes) add(failure, verdict, slice time.Duration) {
	r.failure = append(r.failure, failure)
	r.verdict = append(r.verdict, verdict)
	r.slice = append(r.slice, slice)
}

// measureReaction fails victim's web port for p's prober alone, waits
// until p's Service stopped sending to it, heals it, and returns the
// times from the failure and from the verdict to the last request that
// landed on it, and from the verdict to the slice change.
func measureReaction(ctx context.Context, b *testing.B, s *sideBySide, victim corev1.Pod, p reactionPath) (failure, verdict, slice time.Duration) {
	b.Helper()
	from := clientOffNode(victim.Spec.NodeName)
	l := sendTo(ctx, from, p.ip, 4, 200*time.Millisecond)
	defer l.end()
	w := watchWithdrawals(ctx, b, s.ns, p.service)
	// The pod came back in the previous measurement: wait until
	// kube-proxy sends to it again, or its last landing would be stale.
	harness.Eventually(b, time.Minute, p.service+" to send to "+victim.Name, func() error {
		if last := l.lastOn(victim.Name); time.Since(last) > 100*time.Millisecond {
			return fmt.Errorf("nothing landed on %s for %s", victim.Name, time.Since(last).Round(time.Millisecond))
		}
		return nil
	})
	failed := time.Now()
	if err := control(ctx, victim, 8080, "fail?for="+p.prober); err != nil {
		b.Fatal(err)
	}
	// Stopped: nothing landed on the victim for a whole period after the
	// threshold could have passed.
	harness.Eventually(b, time.Minute, p.service+" to stop sending to "+victim.Name, func() error {
		if last := l.lastOn(victim.Name); time.Since(last) < 2*checkPeriod {
			return fmt.Errorf("%s still sent to %s %s ago", p.service, victim.Name, time.Since(last).Round(time.Millisecond))
		}
		return nil
	})
	l.end()
	at, err := verdictTime(ctx, victim, p.prober, failed)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.stop(); err != nil {
		b.Fatal(err)
	}
	last := l.lastOn(victim.Name)
	failure, verdict, slice = last.Sub(failed), last.Sub(at), w.firstWithdrawal(victim.Status.PodIP).Sub(at)
	if err := control(ctx, victim, 8080, "recover"); err != nil {
		b.Fatal(err)
	}
	waitReadyPods(ctx, b, s.ns, "swh", s.pods)
	waitReadyPods(ctx, b, s.ns, "builtin", s.pods)
	return failure, verdict, slice
}

// verdictTime reads the victim's web port check log and returns when
// prober (kube-probe, swh-probe) made its checkFailures-th failed check
// after failed: the result that flipped its verdict.
func verdictTime(ctx context.Context, victim corev1.Pod, prober string, failed time.Time) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:8080/checks", victim.Status.PodIP), nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, fmt.Errorf("the checks of %s: %w", victim.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return time.Time{}, err
	}
	count := 0
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var nanos int64
		var status int
		var agent string
		if _, err := fmt.Sscanf(line, "%d %d %q", &nanos, &status, &agent); err != nil {
			return time.Time{}, fmt.Errorf("check log line %q: %w", line, err)
		}
		at := time.Unix(0, nanos)
		if name, _, _ := strings.Cut(agent, "/"); name != prober || at.Before(failed) || status == http.StatusOK {
			continue
		}
		if count++; count == checkFailures {
			return at, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: no %d failed checks by %s after the failure in:\n%s", victim.Name, checkFailures, prober, body)
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
	lb, ls := sendTo(ctx, from, s.builtin, 2, 0), sendTo(ctx, from, s.swh, 2, 0)
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
