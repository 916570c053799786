package realnode_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/harness"
)

// served is a resource under traffic: three workload pods, one per node,
// published and programmed in every kube-proxy.
type served struct {
	ns, name string
	svc      *corev1.Service
	pods     []corev1.Pod
	url      string
}

func serve(ctx context.Context, t testing.TB, d *appsv1.Deployment) *served {
	t.Helper()
	if err := cluster.CP.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	s := &served{ns: d.Namespace, name: d.Name}
	s.pods = waitAvailable(ctx, t, s.ns, s.name, int(*d.Spec.Replicas))
	s.svc = resource(ctx, t, s.ns, s.name, s.name)
	waitReadyPods(ctx, t, s.ns, s.name, s.pods)
	s.url = fmt.Sprintf("http://%s/", s.svc.Spec.ClusterIP)
	return s
}

// TestAgentUpgradeUnderTraffic (scenario 2): an upgrade across versions,
// as docs/installing.md says: a new version is published to the registry
// (images and chart), its CRD applied server-side, then helm upgrade
// replaces every agent, one node at a time, and the controller replicas,
// while clients on every node send requests: none fails, no endpoint that
// was passing is ever withdrawn, and every pod runs the new version.
func TestAgentUpgradeUnderTraffic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := serve(ctx, t, workload(testNamespace(t), "web", 3))
	before := agentPods(ctx, t)
	w := watchWithdrawals(ctx, t, s.ns, s.name)
	// A new version of the release, pushed as a user would: its images
	// (tagged and stamped with the version) and its chart, pinned to them.
	version := fmt.Sprintf("0.1.1-upgrade.%d", upgrades.Add(1))
	if out, err := cluster.Publish(ctx, version); err != nil {
		t.Fatalf("publishing %s: %v\n%s", version, err, out)
	}
	ls := startLoops(ctx, s.url)
	start := time.Now()
	// As docs/installing.md says: the CRD first, then the release.
	if err := cluster.ApplyCRDs(ctx); err != nil {
		ls.stop()
		t.Fatalf("applying the CRD of %s: %v", version, err)
	}
	out, err := cluster.InstallChart(ctx, true, "controller.replicas=2")
	took := time.Since(start)
	time.Sleep(2 * time.Second) // traffic after the last agent's start too
	tally := ls.stop()
	withdrawn, werr := w.stop()
	if err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	after := agentPods(ctx, t)
	for node, pod := range before {
		if after[node] == pod {
			t.Fatalf("the agent of %s (%s) was not replaced: %v → %v", node, pod, before, after)
		}
	}
	if werr != nil {
		t.Fatal(werr)
	}
	if tally.Failed > 0 || len(withdrawn) > 0 {
		t.Fatalf("during the agents' rollout: %s; passing endpoints withdrawn: %v\nagents' logs:\n%s", tally, withdrawn,
			cluster.PodLogs(realnode.ChartNamespace, "swh-agent-", 40))
	}
	// Every binary runs the new version's image.
	var pods corev1.PodList
	if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(realnode.ChartNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Labels["app.kubernetes.io/version"] != version {
			t.Errorf("pod %s is labelled version %q after the upgrade to %s", p.Name, p.Labels["app.kubernetes.io/version"], version)
		}
	}
	report(t, "2 upgrade to "+version, tally, "CRD applied and helm upgrade --wait "+took.Round(100*time.Millisecond).String(), "0 endpoints withdrawn")
}

// upgrades counts the upgrades of the run (-count=N repeats them): each
// publishes a version of its own.
var upgrades atomic.Int32

// agentPods maps each node to the name of its agent pod.
func agentPods(ctx context.Context, t testing.TB) map[string]string {
	t.Helper()
	var pods corev1.PodList
	if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(realnode.ChartNamespace), client.MatchingLabels{"app.kubernetes.io/component": "agent"}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p.Name
		}
	}
	if len(out) != len(cluster.Nodes) {
		t.Fatalf("agent pods: %v, want one per node", out)
	}
	return out
}

// TestControllerFailover (scenario 3): the leader's pod is deleted; the
// standby replica takes the Lease over, and a resource created meanwhile
// converges.
func TestControllerFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	leader := leaseHolder(ctx, t)
	pod := strings.SplitN(leader, "_", 2)[0]
	ns := testNamespace(t)
	if err := cluster.CP.Client.Create(ctx, workload(ns, "web", 3)); err != nil {
		t.Fatal(err)
	}
	pods := waitAvailable(ctx, t, ns, "web", 3)
	start := time.Now()
	if err := cluster.CP.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: realnode.ChartNamespace, Name: pod}}); err != nil {
		t.Fatalf("deleting the leader %s: %v", pod, err)
	}
	// The resource comes once the old leader is gone, so only the standby
	// can make it converge.
	harness.Eventually(t, convergeTimeout, "the old leader's pod gone", func() error {
		err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: realnode.ChartNamespace, Name: pod}, &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	svc := resource(ctx, t, ns, "web", "web")
	waitReadyPods(ctx, t, ns, "web", pods)
	converged := time.Since(start)
	var next string
	harness.Eventually(t, convergeTimeout, "a new leader", func() error {
		next = leaseHolder(ctx, t)
		if strings.HasPrefix(next, pod+"_") {
			return fmt.Errorf("the Lease is still %s's", pod)
		}
		return nil
	})
	ls := startLoops(ctx, "http://"+svc.Spec.ClusterIP+"/")
	time.Sleep(2 * time.Second)
	tally := ls.stop()
	if !tally.LandsOnly(podNames(pods)...) {
		t.Fatalf("requests after the failover: %s", tally)
	}
	report(t, "3 controller failover", tally, "leader "+leader+" → "+next,
		"resource created after the leader's deletion converged in "+converged.Round(10*time.Millisecond).String())
}

// leaseHolder returns the controller's Lease holder (POD_UID).
func leaseHolder(ctx context.Context, t testing.TB) string {
	t.Helper()
	// A rollout just before (the upgrade replaces the controller replicas)
	// leaves the Lease released by the old leader, or held by a pod being
	// deleted, until a new replica takes it: wait for a live holder.
	var holder string
	harness.Eventually(t, convergeTimeout, "the controller's Lease held by a running replica", func() error {
		var lease coordinationv1.Lease
		if err := cluster.CP.Client.Get(ctx, types.NamespacedName{Namespace: realnode.ChartNamespace, Name: "swh-controller"}, &lease); err != nil {
			return fmt.Errorf("the controller's Lease: %w", err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("the controller's Lease has no holder")
		}
		holder = *lease.Spec.HolderIdentity
		pod := &corev1.Pod{}
		name := strings.SplitN(holder, "_", 2)[0]
		if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: realnode.ChartNamespace, Name: name}, pod); err != nil {
			return fmt.Errorf("the holder %s: %w", holder, err)
		}
		if pod.DeletionTimestamp != nil {
			return fmt.Errorf("the holder %s is being deleted", holder)
		}
		return nil
	})
	return holder
}

// TestRollingUpdate (scenario 4): a rolling update of the workload, whose
// pods keep serving for 3 s after SIGTERM (a preStop delay) and pass a
// kubelet readiness probe: terminating endpoints serve until the container
// stops, and no request fails.
func TestRollingUpdate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	d := workload(testNamespace(t), "web", 3)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
	}}
	d.Spec.Template.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable = corev1.ScheduleAnyway
	c := &d.Spec.Template.Spec.Containers[0]
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/swh", "sleep", "3s"}}}}
	c.ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}}
	s := serve(ctx, t, d)
	// Every old pod, once terminating, must stay published serving until
	// its container stops (its preStop delay): what kube-proxy falls back
	// to when no ready endpoint is left.
	w := watchWithdrawals(ctx, t, s.ns, s.name)
	ls := startLoops(ctx, s.url)
	start := time.Now()
	if err := cluster.CP.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	before := d.DeepCopy() // a patch: the deployment controller writes the status
	d.Spec.Template.Annotations = map[string]string{"rollout": "1"}
	if err := cluster.CP.Client.Patch(ctx, d, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	var newPods []corev1.Pod
	harness.Eventually(t, 4*time.Minute, "the rollout to finish", func() error {
		if err := cluster.CP.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != 3 || st.Replicas != 3 || st.AvailableReplicas != 3 {
			return fmt.Errorf("status %+v", st)
		}
		var pods corev1.PodList
		if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{"app": s.name}); err != nil {
			return err
		}
		if len(pods.Items) != 3 {
			return fmt.Errorf("%d pods (old ones still terminating)", len(pods.Items))
		}
		newPods = pods.Items
		return nil
	})
	waitReadyPods(ctx, t, s.ns, s.name, newPods)
	took := time.Since(start)
	time.Sleep(time.Second)
	tally := ls.stop()
	if _, err := w.stop(); err != nil {
		t.Fatal(err)
	}
	if tally.Failed > 0 {
		t.Fatalf("during the rolling update: %s", tally)
	}
	for _, p := range s.pods {
		if !w.published(p.Status.PodIP, "-ST") {
			t.Errorf("old pod %s (%s) was never published serving and terminating: %v", p.Name, p.Status.PodIP, w.states[p.Status.PodIP])
		}
	}
	report(t, "4 rolling update", tally, "rollout and old pods gone in "+took.Round(100*time.Millisecond).String())
}
