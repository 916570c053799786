package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/e2e"
	"github.com/swh-dev/swh/test/harness"
)

// convergeTimeout bounds every wait for the cluster to reach a state.
const convergeTimeout = 2 * time.Minute

// resource creates a ServiceWithHealthchecks for the pods labelled
// app=APP: port 80 to the pods' 8080, probed by GET /healthz every second
// (two failures take a pod out, one success brings it back). It waits
// until kube-proxy on every node has rules for its ClusterIP. opts change
// the resource before it is created.
func resource(ctx context.Context, t testing.TB, ns, name, app string, opts ...func(*swhv1alpha1.ServiceWithHealthchecks)) *corev1.Service {
	t.Helper()
	r := &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:    []swhv1alpha1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			Selector: map[string]string{"app": app},
			Healthcheck: &swhv1alpha1.Healthcheck{PeriodSeconds: 1, Probes: []swhv1alpha1.Probe{{
				Mode: swhv1alpha1.ProbeModeHTTP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 2,
				HTTP: &swhv1alpha1.HTTPProbe{TargetPort: intstr.FromInt32(8080), Path: "/healthz", Method: "GET", Scheme: swhv1alpha1.HTTPSchemeHTTP},
			}}},
		},
	}
	for _, opt := range opts {
		opt(r)
	}
	if err := cluster.CP.Client.Create(ctx, r); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	svc := &corev1.Service{}
	harness.Eventually(t, convergeTimeout, "the Service of "+name, func() error {
		if err := cluster.CP.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
			return err
		}
		if svc.Spec.ClusterIP == "" {
			return fmt.Errorf("no ClusterIP yet")
		}
		return nil
	})
	if err := cluster.WaitProgrammed(ctx, svc.Spec.ClusterIP); err != nil {
		t.Fatal(err)
	}
	return svc
}

// readyEndpoints lists the addresses published ready for the Service, with
// the pods they belong to, across its slices.
func readyEndpoints(ctx context.Context, ns, name string) (map[string]string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := cluster.CP.Client.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	ready := map[string]string{}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				pod := ""
				if e.TargetRef != nil {
					pod = e.TargetRef.Name
				}
				for _, a := range e.Addresses {
					ready[a] = pod
				}
			}
		}
	}
	return ready, nil
}

// waitReadyPods waits until exactly the pods want are published ready.
func waitReadyPods(ctx context.Context, t testing.TB, ns, name string, want []corev1.Pod) {
	t.Helper()
	harness.Eventually(t, convergeTimeout, fmt.Sprintf("%d ready endpoints of %s", len(want), name), func() error {
		got, err := readyEndpoints(ctx, ns, name)
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("ready: %v", got)
		}
		for _, p := range want {
			if got[p.Status.PodIP] != p.Name {
				return fmt.Errorf("%s (%s) not ready; ready: %v", p.Name, p.Status.PodIP, got)
			}
		}
		return nil
	})
	addrs := []string{}
	for _, p := range want {
		addrs = append(addrs, p.Status.PodIP)
	}
	if err := cluster.WaitProgrammed(ctx, "", addrs...); err != nil {
		t.Fatal(err)
	}
}

// loops sends requests to url from the client namespace of every node,
// until stopped.
type loops []*e2e.Loop

func startLoops(ctx context.Context, url string) loops {
	var ls loops
	for _, n := range cluster.Nodes {
		ls = append(ls, e2e.StartLoop(ctx, e2e.HTTPGet(n.Client.NS, url)))
	}
	return ls
}

// stop ends every loop and returns the merged tally.
func (ls loops) stop() e2e.Tally {
	var total e2e.Tally
	for _, l := range ls {
		total.Merge(l.Stop())
	}
	return total
}

// podNames lists the names of pods.
func podNames(pods []corev1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

// report logs a scenario's figure in a form the note quotes.
func report(t testing.TB, scenario string, tally e2e.Tally, extra ...string) {
	t.Helper()
	t.Logf("SCENARIO %s: %s%s", scenario, tally, strings.Join(append([]string{""}, extra...), "; "))
}
