package realnode_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// soakWorld is what the soak runs on: the workload and its resources.
type soakWorld struct {
	ns        string
	clusterIP string
	barrier   *proxyBarrier
}

func startSoakWorld(ctx context.Context, t *testing.T) *soakWorld {
	t.Helper()
	ns := testNamespace(t)
	d := soakDeployment(ns)
	if err := cluster.CP.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	pods := waitAvailable(ctx, t, ns, d.Name, int(*d.Spec.Replicas))
	svc := resource(ctx, t, ns, "soak", "soak", soakResource)
	waitReadyPods(ctx, t, ns, "soak", pods)
	resource(ctx, t, ns, soakPrimary, "soak", soakPrimaryResource)
	barrier, err := newProxyBarrier(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	w := &soakWorld{ns: ns, clusterIP: svc.Spec.ClusterIP, barrier: barrier}
	if err := waitFor(ctx, time.Minute, func() error {
		_, err := w.primary(ctx, pods)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// pods lists the workload's pods that run and are not being deleted.
func (w *soakWorld) pods(ctx context.Context) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := cluster.CP.Client.List(ctx, &list, client.InNamespace(w.ns), client.MatchingLabels{"app": "soak"}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// converge waits until the cluster is whole again after a fault: every node
// and the chart's pods Ready, six workload pods running, each published
// ready on both ports (and nothing else), and kube-proxy on every node
// sending to them, its watch live (proxyBarrier: so it has applied every
// slice write before, the withdrawals too). It records how long that took
// after the heal.
func (w *soakWorld) converge(ctx context.Context, rec *faultRecord) error {
	bound := rec.convergeBound
	if bound == 0 {
		bound = 2 * time.Minute
	}
	var last []corev1.Pod
	start, slow := time.Now(), ""
	err := waitFor(ctx, bound, func() error {
		err := w.whole(ctx, &last)
		if err != nil && slow == "" && time.Since(start) > 10*time.Second {
			slow = err.Error()
		}
		return err
	})
	if slow != "" {
		// What a slow convergence waited for, in the fault's line.
		rec.detail += "; 10 s after the heal: " + slow
	}
	if err != nil {
		return fmt.Errorf("not converged %s after the heal: %w", bound, err)
	}
	addrs := make([]string, 0, len(last))
	for _, p := range last {
		addrs = append(addrs, p.Status.PodIP)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cluster.WaitProgrammed(pctx, w.clusterIP, addrs...); err != nil {
		return fmt.Errorf("kube-proxy rules after the heal: %w", err)
	}
	if err := w.barrier.pass(ctx, max(bound-time.Since(rec.healedAt), 30*time.Second)); err != nil {
		return err
	}
	rec.converged = time.Since(rec.healedAt)
	if rec.converged > bound {
		return fmt.Errorf("converged %s after the heal, over its bound %s", rec.converged.Round(100*time.Millisecond), bound)
	}
	return nil
}

// whole reports why the cluster is not whole (see converge); when it is,
// it sets *pods to the workload's pods.
func (w *soakWorld) whole(ctx context.Context, out *[]corev1.Pod) error {
	if err := chartSettled(ctx); err != nil {
		return err
	}
	pods, err := w.pods(ctx)
	if err != nil {
		return err
	}
	if len(pods) != 6 {
		return fmt.Errorf("%d workload pods running", len(pods))
	}
	for _, p := range pods {
		if !podReady(&p) {
			return fmt.Errorf("pod %s not Ready", p.Name)
		}
	}
	ready, err := readyPerPort(ctx, w.ns, "soak")
	if err != nil {
		return err
	}
	for _, sp := range soakPorts {
		got := ready[sp.name]
		if len(got) != len(pods) {
			return fmt.Errorf("port %s: %d ready endpoints, want %d: %v", sp.name, len(got), len(pods), got)
		}
		for _, p := range pods {
			if got[p.Status.PodIP] != p.Name {
				return fmt.Errorf("port %s: %s (%s) not ready", sp.name, p.Name, p.Status.PodIP)
			}
		}
	}
	if _, err := w.primary(ctx, pods); err != nil {
		return err
	}
	*out = pods
	return nil
}

// primary returns the one pod published ready on the exclusive port, or
// why there is not exactly one among pods.
func (w *soakWorld) primary(ctx context.Context, pods []corev1.Pod) (corev1.Pod, error) {
	ready, err := readyEndpoints(ctx, w.ns, soakPrimary)
	if err != nil {
		return corev1.Pod{}, err
	}
	if len(ready) != 1 {
		return corev1.Pod{}, fmt.Errorf("exclusive port %s: %d ready endpoints, want 1: %v", soakPrimaryPort, len(ready), ready)
	}
	for _, p := range pods {
		if ready[p.Status.PodIP] == p.Name {
			return p, nil
		}
	}
	return corev1.Pod{}, fmt.Errorf("exclusive port %s: ready on %v, not one of the running pods", soakPrimaryPort, ready)
}

// chartSettled reports why the nodes or the chart's pods are not all
// Ready, as settle checks.
func chartSettled(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := cluster.CP.Client.List(ctx, &nodes); err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if !nodeReady(&n) {
			return fmt.Errorf("node %s not Ready", n.Name)
		}
	}
	return chartReady(ctx, true)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyPerPort maps each port name to the addresses published ready on it
// and their pods.
func readyPerPort(ctx context.Context, ns, name string) (map[string]map[string]string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := cluster.CP.Client.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, s := range slices.Items {
		port := ""
		if len(s.Ports) > 0 && s.Ports[0].Name != nil {
			port = *s.Ports[0].Name
		}
		if out[port] == nil {
			out[port] = map[string]string{}
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready && e.TargetRef != nil {
				for _, a := range e.Addresses {
					out[port][a] = e.TargetRef.Name
				}
			}
		}
	}
	return out, nil
}

// cleanUp deletes the resources and the workload and checks that nothing
// of them is left: no Service, no slice, no Lease, no pod.
func (w *soakWorld) cleanUp(ctx context.Context) error {
	r := &swhv1alpha1.ServiceWithHealthchecks{}
	r.Namespace, r.Name = w.ns, "soak"
	primary := &swhv1alpha1.ServiceWithHealthchecks{}
	primary.Namespace, primary.Name = w.ns, soakPrimary
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = w.ns, "soak"
	for _, o := range append([]client.Object{r, primary, d}, w.barrier.objects()...) {
		if err := cluster.CP.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return waitFor(ctx, 2*time.Minute, func() error {
		var left []string
		var slices discoveryv1.EndpointSliceList
		if err := cluster.CP.Client.List(ctx, &slices, client.InNamespace(w.ns)); err != nil {
			return err
		}
		for _, s := range slices.Items {
			left = append(left, "EndpointSlice "+s.Name)
		}
		var svcs corev1.ServiceList
		if err := cluster.CP.Client.List(ctx, &svcs, client.InNamespace(w.ns)); err != nil {
			return err
		}
		for _, s := range svcs.Items {
			left = append(left, "Service "+s.Name)
		}
		var leases coordinationv1.LeaseList
		if err := cluster.CP.Client.List(ctx, &leases, client.InNamespace(w.ns)); err != nil {
			return err
		}
		for _, l := range leases.Items {
			left = append(left, "Lease "+l.Name)
		}
		var pods corev1.PodList
		if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(w.ns)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			left = append(left, "Pod "+p.Name)
		}
		if len(left) > 0 {
			return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
		}
		return nil
	})
}

// waitFor retries check every 200 ms until it returns nil, and returns its
// last error once timeout passed.
func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
