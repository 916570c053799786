package agent_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentapp "github.com/swh-dev/swh/agent/app"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// withdrawals watches the slices of resources and records every endpoint
// that was published and then read neither ready nor serving.
type withdrawals struct {
	mu   sync.Mutex
	seen map[string]bool // pod/port once published ready
	out  []string        // pod/port withdrawn, at most once each
}

func watchWithdrawals(t *testing.T, ns string, names ...string) *withdrawals {
	t.Helper()
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w := &withdrawals{seen: map[string]bool{}}
	for _, name := range names {
		watch, err := wc.Watch(context.Background(), &discoveryv1.EndpointSliceList{}, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(watch.Stop)
		go func() {
			for ev := range watch.ResultChan() {
				s, ok := ev.Object.(*discoveryv1.EndpointSlice)
				if !ok {
					continue
				}
				port, _ := endpoints.SlicePort(s)
				w.mu.Lock()
				for _, ep := range s.Endpoints {
					if ep.TargetRef == nil {
						continue
					}
					key := ep.TargetRef.Name + "/" + port
					ready, serving, _ := endpoints.Conditions(ep.Conditions)
					switch {
					case ready || serving:
						w.seen[key] = true
					case w.seen[key]:
						w.seen[key] = false
						w.out = append(w.out, key)
					}
				}
				w.mu.Unlock()
			}
		}()
	}
	return w
}

func (w *withdrawals) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.out...)
}

// gauge reads one sample of an agent's gauge with exactly these labels.
func (a *agent) gauge(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := a.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// waitAgentEvent waits for an event of reason on the resource and returns
// its note.
func waitAgentEvent(t *testing.T, ns, resource, reason string) string {
	t.Helper()
	note := ""
	harness.Eventually(t, 20*time.Second, "a "+reason+" event on "+resource, func() error {
		list := &eventsv1.EventList{}
		if err := controlPlane.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == resource && e.Reason == reason {
				note = e.Note
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(list.Items))
	})
	return note
}

// waitCondition waits until the resource's FailingStatic condition is
// there (want true) or gone, and returns its message.
func waitFailingStatic(t *testing.T, ns, name string, want bool) string {
	t.Helper()
	msg := ""
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("condition FailingStatic present: %v", want), func() error {
		swh := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, swh); err != nil {
			return err
		}
		c := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionFailingStatic)
		if (c != nil) != want {
			return fmt.Errorf("conditions %+v", swh.Status.Conditions)
		}
		if c != nil {
			msg = c.Message
		}
		return nil
	})
	return msg
}

// TestFailStaticWrongSecret: a resource's probe pointed at a Secret that
// does not exist cannot run; the pods that passed stay published (reason
// fail-static with the probe's own reason, an event, the metric, the
// condition, kubectl swh), and the hold ends when the probe runs again.
// A wrong password that every pod refuses is kept the same way; a pod
// whose own server fails meanwhile is withdrawn.
func TestFailStaticWrongSecret(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	want := newGatedDatabase(t, ns, "db") // db-0, and its credentials
	ip := harness.PodIP(t)
	second := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ip})
	dbPod(t, ns, "db-1", nodeA, ip)
	want["db-node-a"] = "db-0:TTF,db-1:TTF"
	waitPublished(t, ns, "db", want)
	w := watchWithdrawals(t, ns, "db")
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	key := types.NamespacedName{Namespace: ns, Name: "db"}
	setSecret := func(name string) {
		t.Helper()
		if err := controlPlane.Client.Get(context.Background(), key, swh); err != nil {
			t.Fatal(err)
		}
		// A patch, not an update: the agent writes the resource's status
		// meanwhile, and an update from the read would conflict with it.
		before := swh.DeepCopy()
		swh.Spec.Healthcheck.Probes[0].PostgreSQL.AuthSecretName = name
		if err := controlPlane.Client.Patch(context.Background(), swh, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
	}

	setSecret("db-missing")
	r := waitReason(t, ns, "db", "db-0", swhv1alpha1.ReasonFailStatic)
	if !strings.Contains(r.Message, "secret: Secret "+ns+"/db-missing not found") {
		t.Errorf("the kept endpoint's message does not give the probe's reason: %q", r.Message)
	}
	note := waitAgentEvent(t, ns, "db", swhv1alpha1.EventReasonFailingStatic)
	t.Logf("event: %s", note)
	harness.Eventually(t, 10*time.Second, "both pods kept", func() error {
		if got := a.gauge(t, "swh_agent_held_targets", map[string]string{"scope": "probe", "reason": "secret"}); got != 2 {
			return fmt.Errorf("swh_agent_held_targets{scope=probe,reason=secret} = %v, want 2", got)
		}
		return nil
	})
	if got := a.gauge(t, "swh_agent_checker_suspected", map[string]string{"scope": "probe", "reason": "secret"}); got != 1 {
		t.Errorf("swh_agent_checker_suspected{scope=probe,reason=secret} = %v, want 1", got)
	}
	t.Logf("condition: %s", waitFailingStatic(t, ns, "db", true))
	st, err := pluginStatus(t, operatorKubeconfig(t, ""), namespace(t), ns, "db")
	if err != nil {
		t.Fatal(err)
	}
	ep, ok := endpointOf(st, "", "db-0")
	if !ok || ep.Reason == nil || ep.Reason.Reason != swhv1alpha1.ReasonFailStatic || !strings.Contains(ep.Reason.Message, "secret") || !ep.Ready {
		t.Errorf("kubectl swh status shows db-0 as %+v", ep)
	}
	time.Sleep(3 * 2 * time.Second) // three more periods of the probe
	if out := w.list(); len(out) > 0 {
		t.Fatalf("withdrawn while the probe could not run: %v", out)
	}

	setSecret("db-credentials")
	waitReason(t, ns, "db", "db-0", "")
	waitAgentEvent(t, ns, "db", swhv1alpha1.EventReasonFailStaticEnded)
	waitFailingStatic(t, ns, "db", false)

	// A wrong password: the servers refuse it on every pod.
	secret := &corev1.Secret{}
	if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "db-credentials"}, secret); err != nil {
		t.Fatal(err)
	}
	secret.Data["password"] = []byte("not-the-password")
	if err := controlPlane.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	r = waitReason(t, ns, "db", "db-0", swhv1alpha1.ReasonFailStatic)
	if !strings.Contains(r.Message, ": auth: ") {
		t.Errorf("the kept endpoint's message does not give the probe's reason: %q", r.Message)
	}
	if out := w.list(); len(out) > 0 {
		t.Fatalf("withdrawn while every pod refused the probe's password: %v", out)
	}
	t.Logf("kept on a wrong password: %s", r.Message)

	// db-1's server stops: refused is its own failure, withdrawn at once
	// while db-0 stays kept.
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	want["db-node-a"] = "db-0:TTF,db-1:FFF"
	waitPublished(t, ns, "db", want)
	if r := waitReason(t, ns, "db", "db-0", swhv1alpha1.ReasonFailStatic); !strings.Contains(r.Message, ": auth: ") {
		t.Errorf("db-0 kept for %q", r.Message)
	}
}

// TestFailStaticNodeSilent: every probe of the node times out (its pods
// stay Ready): nothing is withdrawn; once one pod answers again, the others
// that still time out are withdrawn at their next result, and one pod
// timing out among passing ones is withdrawn as before.
func TestFailStaticNodeSilent(t *testing.T) {
	a := startAgent(t, nodeA)
	ns := namespace(t)
	backends := map[string]*backend{}
	for _, pod := range []struct{ app, name string }{{"web", "web-a"}, {"web", "web-b"}, {"api", "api-a"}} {
		backends[pod.name] = startBackend(t, ns, pod.app, pod.name, nodeA)
	}
	for _, name := range []string{"web", "api"} {
		probe := fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))
		probe.FailureThreshold = 3
		if err := controlPlane.Client.Create(context.Background(), resource(ns, name, webAndSMTP[:1], probe)); err != nil {
			t.Fatal(err)
		}
	}
	waitPublished(t, ns, "web", map[string]string{"web-web-node-a": "web-a:TTF,web-b:TTF"})
	waitPublished(t, ns, "api", map[string]string{"api-web-node-a": "api-a:TTF"})
	w := watchWithdrawals(t, ns, "web", "api")

	silenced := time.Now()
	for _, b := range backends {
		b.http.SetDelay(3 * time.Second) // over the 1 s timeout
	}
	harness.Eventually(t, 10*time.Second, "the node's probes suspected", func() error {
		if a.gauge(t, "swh_agent_checker_suspected", map[string]string{"scope": "node", "reason": "timeout"}) != 1 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	suspected := time.Since(silenced)
	harness.Eventually(t, 10*time.Second, "three targets held", func() error {
		if got := a.gauge(t, "swh_agent_held_targets", map[string]string{"scope": "node", "reason": "timeout"}); got != 3 {
			return fmt.Errorf("%v held", got)
		}
		return nil
	})
	r := waitReason(t, ns, "web", "web-a", swhv1alpha1.ReasonFailStatic)
	time.Sleep(3 * time.Second)
	if out := w.list(); len(out) > 0 {
		t.Fatalf("withdrawn while every probe of the node timed out: %v", out)
	}
	t.Logf("every probe of the node silenced: suspected after %s (period 1 s, timeout 1 s), nothing withdrawn; %s", suspected.Round(time.Millisecond), r.Message)

	// One pod answers: the checker works; the others are silent pods.
	backends["api-a"].http.SetDelay(0)
	waitPublished(t, ns, "web", map[string]string{"web-web-node-a": "web-a:FFF,web-b:FFF"})
	waitPublished(t, ns, "api", map[string]string{"api-web-node-a": "api-a:TTF"})

	// One pod silent among passing ones: withdrawn, never held.
	backends["web-a"].http.SetDelay(0)
	backends["web-b"].http.SetDelay(0)
	waitPublished(t, ns, "web", map[string]string{"web-web-node-a": "web-a:TTF,web-b:TTF"})
	backends["web-b"].http.SetDelay(3 * time.Second)
	waitPublished(t, ns, "web", map[string]string{"web-web-node-a": "web-a:TTF,web-b:FFF"})
	if got := a.gauge(t, "swh_agent_held_targets", map[string]string{"scope": "node", "reason": "timeout"}); got != 0 {
		t.Errorf("%v targets held while one pod is silent among passing ones", got)
	}
}

// TestFailStaticSideBySide: every probe of both nodes times out, their
// pods still Ready; node A's agent fails static (the default), node B's
// runs with fail static off (--fail-static=false, the behaviour before):
// A keeps every endpoint, B withdraws every one.
func TestFailStaticSideBySide(t *testing.T) {
	startAgent(t, nodeA)
	startAgentWith(t, nodeB, func(o *agentapp.Options) { o.Publisher.FailClosed = true })
	ns := namespace(t)
	var backends []*backend
	for _, node := range []string{nodeA, nodeB} {
		for _, app := range []string{"web", "web", "api"} {
			backends = append(backends, startBackend(t, ns, app, fmt.Sprintf("%s-%s-%d", app, node, len(backends)), node))
		}
	}
	for _, name := range []string{"web", "api"} {
		probe := fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))
		probe.FailureThreshold = 3
		if err := controlPlane.Client.Create(context.Background(), resource(ns, name, webAndSMTP[:1], probe)); err != nil {
			t.Fatal(err)
		}
	}
	ready := func(node string) (n int) {
		t.Helper()
		got, _, err := published(context.Background(), ns, "web")
		if err != nil {
			t.Fatal(err)
		}
		more, _, err := published(context.Background(), ns, "api")
		if err != nil {
			t.Fatal(err)
		}
		for name, eps := range more {
			got[name] = eps
		}
		for name, eps := range got {
			if strings.HasSuffix(name, node) {
				n += strings.Count(eps, ":TTF")
			}
		}
		return n
	}
	harness.Eventually(t, 30*time.Second, "three pods ready on each node", func() error {
		if a, b := ready(nodeA), ready(nodeB); a != 3 || b != 3 {
			return fmt.Errorf("ready: %d on %s, %d on %s", a, nodeA, b, nodeB)
		}
		return nil
	})
	for _, b := range backends {
		b.http.SetDelay(3 * time.Second) // over the 1 s timeout
	}
	harness.Eventually(t, 15*time.Second, "node B's pods withdrawn", func() error {
		if b := ready(nodeB); b != 0 {
			return fmt.Errorf("%d still ready on %s", b, nodeB)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // node A's pods reached their threshold as long ago
	a, b := ready(nodeA), ready(nodeB)
	t.Logf("every probe of both nodes timing out: fail static kept %d of 3 endpoints, fail closed (--fail-static=false) %d of 3", a, b)
	if a != 3 {
		t.Errorf("fail static kept %d of 3 endpoints", a)
	}
}
