package disruption_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/disruption"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// TestPublishNotReadyAddresses: with publishNotReadyAddresses every broker
// is published ready and the probes' verdict is only in serving. A broker
// failing its probe does not count, and a second eviction is refused.
func TestPublishNotReadyAddresses(t *testing.T) {
	ctx := context.Background()
	k := newKafkaWith(t, kafkaOptions{budget: budgetMaxUnavailable(1), publishNotReady: true})
	k.setInSync(0, false)
	k.waitPassing(t, map[string]bool{brokerName(0): false, brokerName(1): true, brokerName(2): true})
	harness.Eventually(t, 10*time.Second, "a dry-run eviction of kafka-1 refused", func() error {
		err := evict(ctx, k.ns, brokerName(1), true)
		if err == nil {
			return fmt.Errorf("allowed while kafka-0 fails its probe (published ready, not serving)")
		}
		if !apierrors.IsTooManyRequests(err) || !contains(err, "kafka-0 (not ready on port client)") {
			return fmt.Errorf("%v, want the guard's 429 naming kafka-0", err)
		}
		return nil
	})
	if st := k.resource(t).Status.Disruption; st == nil || st.CurrentHealthy != 2 {
		t.Errorf("status.disruption = %+v, want 2 healthy", st)
	}
}

// TestAnotherNodesEndpoints: a slice that another node's agent may write
// (labelled as its own, endpoints with its own nodeName, as the agent
// admission policy allows) naming the brokers neither vetoes nor vouches
// for them, whatever order the guard reads the slices in: the guard's
// cache lists them in no fixed order, so each check is asked ten times.
func TestAnotherNodesEndpoints(t *testing.T) {
	ctx := context.Background()
	const evil = "node-evil"
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: evil}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	k := newKafka(t, budgetMaxUnavailable(1))
	svc := &corev1.Service{}
	if err := controlPlane.Client.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: "kafka"}, svc); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := controlPlane.Client.List(ctx, pods, client.InNamespace(k.ns)); err != nil {
		t.Fatal(err)
	}
	hostile := func(ready bool) {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "kafka-client-" + evil, Labels: map[string]string{
				discoveryv1.LabelServiceName: "kafka", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
				endpoints.DefaultNodeLabel: evil,
			}, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "kafka", UID: svc.UID, Controller: ptr.To(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("client"), Port: ptr.To[int32](clientPort)}},
		}
		for i, p := range pods.Items {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.244.255.%d", 10+i)},
				NodeName:   ptr.To(evil),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: k.ns, Name: p.Name, UID: p.UID},
			})
		}
		cur := &discoveryv1.EndpointSlice{}
		err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(s), cur)
		switch {
		case apierrors.IsNotFound(err):
			err = controlPlane.Client.Create(ctx, s)
		case err == nil:
			cur.Endpoints = s.Endpoints
			err = controlPlane.Client.Update(ctx, cur)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Until both replicas' caches have it.
		harness.Eventually(t, 10*time.Second, "the replicas caching the hostile slice", func() error {
			for i, g := range guards {
				got := &discoveryv1.EndpointSlice{}
				if err := g.cache.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
					return fmt.Errorf("replica %d: %w", i, err)
				}
				if len(got.Endpoints) == 0 || *got.Endpoints[0].Conditions.Ready != ready {
					return fmt.Errorf("replica %d has an older slice", i)
				}
			}
			return nil
		})
	}

	// No veto: node-evil publishes every broker (ready, on itself). The
	// budget still allows one disruption.
	hostile(true)
	for i := range 10 {
		if err := evict(ctx, k.ns, brokerName(1), true); err != nil {
			t.Fatalf("dry run %d: %v, want allowed: another node's endpoints veto the brokers", i, err)
		}
	}
	// No vouching: kafka-0 fails; node-evil says it passes.
	k.setInSync(0, false)
	k.waitPassing(t, map[string]bool{brokerName(0): false})
	harness.Eventually(t, 10*time.Second, "the guard seeing kafka-0 fail", func() error {
		if err := evict(ctx, k.ns, brokerName(1), true); !apierrors.IsTooManyRequests(err) {
			return fmt.Errorf("dry run: %v, want 429", err)
		}
		return nil
	})
	for i := range 10 {
		err := evict(ctx, k.ns, brokerName(1), true)
		if !apierrors.IsTooManyRequests(err) || !contains(err, "kafka-0 (not ready on port client)") {
			t.Fatalf("dry run %d: %v, want 429 naming kafka-0: another node's endpoint vouched for it", i, err)
		}
	}
}

// TestRetryJudgedAgain: the guard allows kafka-1's eviction and a PDB
// refuses it; kafka-1 holds a reservation. Then kafka-2 stops passing. The
// retry of kafka-1 (kubectl drain retries every 5 s) is judged on the
// current count: the guard refuses it (1 of 3 would be left passing).
func TestRetryJudgedAgain(t *testing.T) {
	ctx := context.Background()
	k := newKafka(t, budgetMaxUnavailable(1))
	k.createPDB(t, 0, 0)
	if err := evict(ctx, k.ns, brokerName(1), false); !contains(err, "violate the pod's disruption budget") {
		t.Fatalf("first eviction of kafka-1: %v, want the PDB's refusal after the guard allowed it", err)
	}
	if st := k.resource(t).Status.Disruption; st == nil || len(st.Reservations) != 1 {
		t.Fatalf("reservations %+v, want kafka-1's", st)
	}
	k.setInSync(2, false)
	k.waitPassing(t, map[string]bool{brokerName(2): false})
	harness.Eventually(t, 10*time.Second, "the retry refused by the guard", func() error {
		err := evict(ctx, k.ns, brokerName(1), false)
		if !apierrors.IsTooManyRequests(err) || !contains(err, "ServiceWithHealthchecks "+k.ns+"/kafka") {
			return fmt.Errorf("retry of kafka-1: %v, want the guard's 429", err)
		}
		return nil
	})
}

// TestConflictKeepsOtherReservation: a guard lists the pods; meanwhile
// another replica reserves a pod created after that list. The first
// guard's write must keep that reservation. The interleaving is forced:
// the other replica's write happens right after this guard's pod list.
func TestConflictKeepsOtherReservation(t *testing.T) {
	ctx := context.Background()
	k := newKafka(t, budgetMaxUnavailable(2))
	base, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	other := func() {
		// A fourth member appears and another replica reserves it.
		pod, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{
			Namespace: k.ns, Name: "kafka-3", Node: nodes[0], Labels: map[string]string{"app": "kafka"},
			IPs: harness.PodIPs(t, 1), Ports: []corev1.ContainerPort{{ContainerPort: clientPort}},
		})
		if err != nil {
			t.Error(err)
			return
		}
		// Written as a replica does: on the resource as read, retried when
		// the status reconciler wrote first.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			swh := k.resource(t)
			swh.Status.Disruption = &swhv1alpha1.DisruptionStatus{Reservations: []swhv1alpha1.DisruptionReservation{
				{Pod: pod.Name, UID: pod.UID, Time: metav1.NewTime(time.Now().Truncate(time.Second))},
			}}
			return controlPlane.Client.Status().Update(ctx, swh)
		})
		if err != nil {
			t.Error(err)
		}
	}
	reader := interceptor.NewClient(base, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		err := c.List(ctx, list, opts...)
		if _, ok := list.(*corev1.PodList); ok {
			once.Do(other)
		}
		return err
	}})
	g := &disruption.Guard{Sources: disruption.Sources{Cache: guards[0].cache, APIReader: reader, Scales: base}, Client: base}
	pod := &corev1.Pod{}
	if err := controlPlane.Client.Get(ctx, types.NamespacedName{Namespace: k.ns, Name: brokerName(0)}, pod); err != nil {
		t.Fatal(err)
	}
	resp := g.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, SubResource: "eviction", Namespace: k.ns, Name: brokerName(0),
		Object: runtime.RawExtension{Raw: []byte(`{"apiVersion":"policy/v1","kind":"Eviction"}`)},
	}})
	if !resp.Allowed {
		t.Fatalf("eviction of kafka-0: %+v, want allowed (expected 4, 3 pass, 2 needed)", resp.Result)
	}
	got := map[string]bool{}
	if st := k.resource(t).Status.Disruption; st != nil {
		for _, r := range st.Reservations {
			got[r.Pod] = true
		}
	}
	if !got["kafka-3"] || !got[brokerName(0)] {
		t.Errorf("reservations %v, want kafka-3's (the other replica's) and kafka-0's", got)
	}
}
