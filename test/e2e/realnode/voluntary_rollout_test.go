package realnode_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/e2e"
	"github.com/swh-dev/swh/test/harness"
)

// TestRolloutGate (scenario 8): the catching-up workload (Ready when its
// port opens, passing its probes 20 s later) is rolled, one extra pod at a
// time and none unavailable, under traffic, twice: once with the
// resource's readiness gate in the pod template (mode Once), so that a new
// pod is Ready only once it passes and the rollout waits for it: no
// request fails; and once without: the rollout replaces every pod before
// any new one passes, and the resource is left with nothing to send to.
func TestRolloutGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := testNamespace(t)
	gated, gatedTook, _ := rollOut(ctx, t, ns, "gated", true)
	plain, plainTook, outage := rollOut(ctx, t, ns, "plain", false)
	// Few failures for a long outage: kube-proxy rejects connections to
	// a Service without endpoints with ICMP, which the kernel rate-limits,
	// so most failed connections wait for a SYN retransmission first.
	t.Logf("FIGURE rollout-gate failures=%d/%d took=%s rollout-nogate failures=%d/%d took=%s outage=%s",
		gated.Failed, gated.Total, gatedTook.Round(100*time.Millisecond), plain.Failed, plain.Total, plainTook.Round(100*time.Millisecond),
		outage.Round(100*time.Millisecond))
	if gated.Failed > 0 {
		t.Errorf("rollout with the readiness gate: %s", gated)
	}
	if plain.Failed == 0 {
		t.Errorf("rollout without the readiness gate failed no request (%s): the scenario proves nothing", plain)
	}
	report(t, "8 rollout with the readiness gate", gated, "rolled in "+gatedTook.Round(100*time.Millisecond).String(),
		fmt.Sprintf("without the gate %s, rolled in %s, requests failing for %s", plain, plainTook.Round(100*time.Millisecond), outage.Round(100*time.Millisecond)))
}

// rollOut creates the resource name and its catching-up Deployment (with
// the resource's readiness gate when gate), waits until every pod passes,
// rolls the Deployment under traffic and waits until every new pod passes.
// It returns the traffic's tally, how long the rollout took and the time
// from the first failed request to the last.
func rollOut(ctx context.Context, t *testing.T, ns, name string, gate bool) (e2e.Tally, time.Duration, time.Duration) {
	t.Helper()
	svc := resource(ctx, t, ns, name, name, func(r *swhv1alpha1.ServiceWithHealthchecks) {
		if gate {
			r.Spec.ReadinessGate = &swhv1alpha1.ReadinessGate{Mode: swhv1alpha1.ReadinessGateOnce}
		}
	})
	d := catchingUp(ns, name)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
	}}
	// The extra pod of a rollout goes to a node that already has one.
	d.Spec.Template.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable = corev1.ScheduleAnyway
	if gate {
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: corev1.PodConditionType(swhv1alpha1.ReadinessGateConditionType(name))}}
	}
	if err := cluster.CP.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	// With the gate, Ready only after passAfter.
	waitReadyPods(ctx, t, ns, name, waitAvailable(ctx, t, ns, name, 3))

	start := time.Now()
	failed := &failureTimes{}
	var ls loops
	for _, n := range cluster.Nodes {
		ls = append(ls, e2e.StartLoop(ctx, failed.record(e2e.HTTPGet(n.Client.NS, "http://"+svc.Spec.ClusterIP+"/"))))
	}
	if err := cluster.CP.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	before := d.DeepCopy() // a patch: the deployment controller writes the status
	d.Spec.Template.Annotations = map[string]string{"rollout": "1"}
	if err := cluster.CP.Client.Patch(ctx, d, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	var newPods []corev1.Pod
	harness.Eventually(t, 5*time.Minute, "the rollout of "+name+" to finish", func() error {
		if err := cluster.CP.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != 3 || st.Replicas != 3 || st.AvailableReplicas != 3 {
			return fmt.Errorf("status %+v", st)
		}
		var pods corev1.PodList
		if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name}); err != nil {
			return err
		}
		if len(pods.Items) != 3 {
			return fmt.Errorf("%d pods (old ones still terminating)", len(pods.Items))
		}
		newPods = pods.Items
		return nil
	})
	took := time.Since(start)
	// Without the gate the new pods pass only now: traffic until they do.
	waitReadyPods(ctx, t, ns, name, newPods)
	passed := time.Since(start)
	time.Sleep(time.Second)
	tally := ls.stop()
	t.Logf("%s: rolled in %s, new pods passing %s after the rollout began; %s", name, took.Round(100*time.Millisecond),
		passed.Round(100*time.Millisecond), failed.span(start))
	return tally, took, failed.last.Sub(failed.first)
}

// failureTimes records when requests failed.
type failureTimes struct {
	mu          sync.Mutex
	n           int
	first, last time.Time
}

func (f *failureTimes) record(req e2e.Request) e2e.Request {
	return func(ctx context.Context) (string, error) {
		pod, err := req(ctx)
		if err != nil && ctx.Err() == nil {
			now := time.Now()
			f.mu.Lock()
			if f.n == 0 {
				f.first = now
			}
			f.n++
			f.last = now
			f.mu.Unlock()
		}
		return pod, err
	}
}

// span says when the failures happened, relative to start.
func (f *failureTimes) span(start time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return "no request failed"
	}
	return fmt.Sprintf("%d requests failed, from +%s to +%s", f.n, f.first.Sub(start).Round(10*time.Millisecond), f.last.Sub(start).Round(10*time.Millisecond))
}
