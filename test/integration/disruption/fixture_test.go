package disruption_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

const clientPort = 9092

// kafka is the seed's stateful system: a StatefulSet of three brokers, one
// per node, each with a backend on its pod address whose health says
// whether the broker is in sync.
type kafka struct {
	ns  string
	set *appsv1.StatefulSet
	// owner is the brokers' controller: the StatefulSet unless
	// kafkaOptions.controller says otherwise.
	owner    metav1.OwnerReference
	ips      []string
	backends []*harness.HTTPServer
}

func brokerName(i int) string { return fmt.Sprintf("kafka-%d", i) }

// newKafka creates the StatefulSet, three passing brokers and the resource
// (with budget, if not nil) in a fresh namespace.
func newKafka(t *testing.T, budget *swhv1alpha1.DisruptionBudget) *kafka {
	t.Helper()
	return newKafkaWith(t, kafkaOptions{budget: budget})
}

type kafkaOptions struct {
	budget *swhv1alpha1.DisruptionBudget
	// publishNotReady sets the resource's publishNotReadyAddresses, as for
	// a StatefulSet's headless Service.
	publishNotReady bool
	// controller, if set, creates the brokers' controller in namespace ns
	// in place of the StatefulSet's controller reference.
	controller func(t *testing.T, ns string) metav1.OwnerReference
}

func newKafkaWith(t *testing.T, opts kafkaOptions) *kafka {
	t.Helper()
	budget := opts.budget
	ctx := context.Background()
	k := &kafka{ns: controlPlane.CleanNamespace(t), ips: harness.PodIPs(t, 3)}
	labels := map[string]string{"app": "kafka"}
	k.set = &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "kafka"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3), ServiceName: "kafka",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "broker", Image: "registry.invalid/kafka:test"}}},
			},
		},
	}
	if err := controlPlane.Client.Create(ctx, k.set); err != nil {
		t.Fatal(err)
	}
	k.owner = metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "kafka", UID: k.set.UID, Controller: ptr.To(true)}
	if opts.controller != nil {
		k.owner = opts.controller(t, k.ns)
	}
	for i, ip := range k.ips {
		srv, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: net.JoinHostPort(ip, fmt.Sprint(clientPort))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Stop() })
		k.backends = append(k.backends, srv)
		k.createBroker(t, i)
	}
	probe := swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeHTTP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
		HTTP: &swhv1alpha1.HTTPProbe{TargetPort: intstr.FromInt32(clientPort), Path: "/", Method: "GET", Scheme: swhv1alpha1.HTTPSchemeHTTP, ExpectedStatusCodes: []string{"200-399"}}}
	swh := &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "kafka"},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:                    []swhv1alpha1.ServicePort{{Name: "client", Port: clientPort, TargetPort: intstr.FromInt32(clientPort)}},
			Selector:                 labels,
			PublishNotReadyAddresses: opts.publishNotReady,
			Healthcheck:              &swhv1alpha1.Healthcheck{PeriodSeconds: 1, Probes: []swhv1alpha1.Probe{probe}},
			DisruptionBudget:         budget,
		},
	}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	k.waitPassing(t, map[string]bool{brokerName(0): true, brokerName(1): true, brokerName(2): true})
	// Both replicas decide from their caches: wait until each has the
	// resource as created (a replica that has not seen a budget yet lets
	// evictions through, see docs/disruptions.md).
	harness.Eventually(t, 10*time.Second, "both guard replicas caching the resource", func() error {
		for i, g := range guards {
			got := &swhv1alpha1.ServiceWithHealthchecks{}
			if err := g.cache.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: "kafka"}, got); err != nil {
				return fmt.Errorf("replica %d: %w", i, err)
			}
			if (got.Spec.DisruptionBudget != nil) != (budget != nil) {
				return fmt.Errorf("replica %d has not seen the budget", i)
			}
		}
		return nil
	})
	return k
}

// createBroker creates broker i, Ready, on node i+1, as the StatefulSet
// controller and the kubelet would.
func (k *kafka) createBroker(t *testing.T, i int) {
	t.Helper()
	ctx := context.Background()
	pod, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{
		Namespace: k.ns, Name: brokerName(i), Node: nodes[i], Labels: map[string]string{"app": "kafka"},
		IPs: []string{k.ips[i]}, Ports: []corev1.ContainerPort{{ContainerPort: clientPort}},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod.OwnerReferences = []metav1.OwnerReference{k.owner}
	if err := controlPlane.Client.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// replaceBroker finishes an evicted broker's deletion as its kubelet would
// and recreates it, Ready; its backend says whether it is in sync.
func (k *kafka) replaceBroker(t *testing.T, i int, inSync bool) {
	t.Helper()
	ctx := context.Background()
	k.setInSync(i, inSync)
	key := types.NamespacedName{Namespace: k.ns, Name: brokerName(i)}
	if err := harness.ForceDeletePod(ctx, controlPlane.Client, key); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, brokerName(i)+" gone", func() error {
		err := controlPlane.Client.Get(ctx, key, &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	k.createBroker(t, i)
}

func (k *kafka) setInSync(i int, inSync bool) {
	if inSync {
		k.backends[i].SetStatus(http.StatusOK)
	} else {
		k.backends[i].SetStatus(http.StatusServiceUnavailable)
	}
}

// waitPassing waits until the agents publish each named broker passing
// (or not) on the client port.
func (k *kafka) waitPassing(t *testing.T, want map[string]bool) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, "brokers published as "+fmt.Sprint(want), func() error {
		got, err := k.passing(context.Background())
		if err != nil {
			return err
		}
		for name, w := range want {
			if got[name] != w {
				return fmt.Errorf("published ready: %v", got)
			}
		}
		return nil
	})
}

// passing maps the brokers of the current pods to passing on the client
// port: serving and not terminating (ready is always true with
// publishNotReadyAddresses).
func (k *kafka) passing(ctx context.Context) (map[string]bool, error) {
	pods := &corev1.PodList{}
	if err := controlPlane.Client.List(ctx, pods, client.InNamespace(k.ns)); err != nil {
		return nil, err
	}
	uids := map[types.UID]string{}
	podNode := map[types.UID]string{}
	for _, p := range pods.Items {
		uids[p.UID] = p.Name
		podNode[p.UID] = p.Spec.NodeName
	}
	slices := &discoveryv1.EndpointSliceList{}
	if err := controlPlane.Client.List(ctx, slices, client.InNamespace(k.ns), client.MatchingLabels{discoveryv1.LabelServiceName: "kafka"}); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || uids[ep.TargetRef.UID] == "" {
				continue // a deleted pod's endpoint
			}
			if ep.NodeName == nil || *ep.NodeName != podNode[ep.TargetRef.UID] {
				continue // another node's word on the pod
			}
			c := ep.Conditions
			out[uids[ep.TargetRef.UID]] = c.Serving != nil && *c.Serving && (c.Terminating == nil || !*c.Terminating)
		}
	}
	return out, nil
}

func (k *kafka) resource(t *testing.T) *swhv1alpha1.ServiceWithHealthchecks {
	t.Helper()
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: k.ns, Name: "kafka"}, swh); err != nil {
		t.Fatal(err)
	}
	return swh
}

// createPDB adds the PodDisruptionBudget a user would write, and waits for
// the disruption controller to count it.
func (k *kafka) createPDB(t *testing.T, maxUnavailable int32, wantAllowed int32) {
	t.Helper()
	ctx := context.Background()
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "kafka"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(maxUnavailable)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kafka"}},
		},
	}
	if err := controlPlane.Client.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	k.waitPDB(t, wantAllowed)
}

func (k *kafka) waitPDB(t *testing.T, allowed int32) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("the PDB allowing %d disruptions", allowed), func() error {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := controlPlane.Client.Get(context.Background(), types.NamespacedName{Namespace: k.ns, Name: "kafka"}, pdb); err != nil {
			return err
		}
		if pdb.Status.ObservedGeneration != pdb.Generation || pdb.Status.DisruptionsAllowed != allowed {
			return fmt.Errorf("status %+v", pdb.Status)
		}
		return nil
	})
}

// evictDryRunRequest asks for a dry-run eviction with dryRun in the
// request's options rather than in the Eviction.
func evictDryRunRequest(ctx context.Context, ns, pod string) error {
	cs, err := kubernetes.NewForConfig(controlPlane.Config)
	if err != nil {
		return err
	}
	ev := &policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}
	return cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("eviction").
		Param("dryRun", metav1.DryRunAll).Body(ev).Do(ctx).Error()
}

// evict asks the API server to evict a broker, as kubectl drain does.
func evict(ctx context.Context, ns, pod string, dryRun bool) error {
	cs, err := kubernetes.NewForConfig(controlPlane.Config)
	if err != nil {
		return err
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}
	if dryRun {
		// Where kubectl drain --dry-run=server puts it.
		ev.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	}
	return cs.PolicyV1().Evictions(ns).Evict(ctx, ev)
}

func budgetMaxUnavailable(n int32) *swhv1alpha1.DisruptionBudget {
	return &swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(n)), Ports: []string{"client"}}
}
