package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

func TestStatusAggregatesSlicesOfAllNodes(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	nodeA, nodeB := "agg-a-"+ns, "agg-b-"+ns
	for _, n := range []string{nodeA, nodeB} {
		if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	swh := newResource(ns, "mail")
	swh.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	swh.Spec.Ports = []swhv1alpha1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "smtp", Port: 25, TargetPort: intstr.FromInt32(2525)},
	}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	// Three pods: p1 and p2 on node A, p3 on node B (dual-stack).
	// web: p1 ready, p2 ready, p3 not ready. smtp: p1 ready, p2 not, p3 ready.
	slices := []*discoveryv1.EndpointSlice{
		agentSlice(ns, "mail", "web", nodeA, discoveryv1.AddressTypeIPv4,
			endpoint("p1", "u1", "10.244.1.1", nodeA, true), endpoint("p2", "u2", "10.244.1.2", nodeA, true)),
		agentSlice(ns, "mail", "smtp", nodeA, discoveryv1.AddressTypeIPv4,
			endpoint("p1", "u1", "10.244.1.1", nodeA, true), endpoint("p2", "u2", "10.244.1.2", nodeA, false)),
		agentSlice(ns, "mail", "web", nodeB, discoveryv1.AddressTypeIPv4, endpoint("p3", "u3", "10.244.2.3", nodeB, false)),
		agentSlice(ns, "mail", "web", nodeB, discoveryv1.AddressTypeIPv6, endpoint("p3", "u3", "fd00:10:244::3", nodeB, false)),
		agentSlice(ns, "mail", "smtp", nodeB, discoveryv1.AddressTypeIPv4, endpoint("p3", "u3", "10.244.2.3", nodeB, true)),
		agentSlice(ns, "mail", "smtp", nodeB, discoveryv1.AddressTypeIPv6, endpoint("p3", "u3", "fd00:10:244::3", nodeB, true)),
	}
	for _, s := range slices {
		if err := controlPlane.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 20*time.Second, "status aggregated", func() error {
		st := getResource(t, ctx, ns, "mail").Status
		want := []swhv1alpha1.PortStatus{
			{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP, ReadyEndpoints: 2, TotalEndpoints: 3},
			{Name: "smtp", Port: 25, Protocol: corev1.ProtocolTCP, ReadyEndpoints: 2, TotalEndpoints: 3},
		}
		if err := expect(st.Ports, want); err != nil {
			return err
		}
		// Only p1 is ready on every port.
		if st.ReadyEndpoints != 1 || st.TotalEndpoints != 3 || st.Ready != "1/3" {
			return fmt.Errorf("overall %d/%d %q, want 1/3", st.ReadyEndpoints, st.TotalEndpoints, st.Ready)
		}
		c := meta.FindStatusCondition(st.Conditions, swhv1alpha1.ConditionEndpointsAvailable)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("EndpointsAvailable %+v", c)
		}
		return nil
	})

	// Every endpoint fails: the condition turns False.
	for _, s := range slices {
		got := &discoveryv1.EndpointSlice{}
		if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			t.Fatal(err)
		}
		for i := range got.Endpoints {
			got.Endpoints[i].Conditions.Ready = new(false)
		}
		if err := controlPlane.Client.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 20*time.Second, "no endpoint available", func() error {
		st := getResource(t, ctx, ns, "mail").Status
		c := meta.FindStatusCondition(st.Conditions, swhv1alpha1.ConditionEndpointsAvailable)
		if c == nil || c.Status != metav1.ConditionFalse || st.Ready != "0/3" {
			return fmt.Errorf("ready %q, EndpointsAvailable %+v", st.Ready, c)
		}
		return nil
	})
}

func TestStaleSlicesAreCollected(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	keep, gone := "hyg-keep-"+ns, "hyg-gone-"+ns
	for _, n := range []string{keep, gone} {
		if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	swh := newResource(ns, "app")
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "child Service created", func() error { _, err := getService(ctx, ns, "app"); return err })
	ep := func(node string) discoveryv1.Endpoint {
		return endpoint("p-"+node, "u-"+node, "10.244.3.1", node, true)
	}
	kept := agentSlice(ns, "app", "http", keep, discoveryv1.AddressTypeIPv4, ep(keep))
	ofGoneNode := agentSlice(ns, "app", "http", gone, discoveryv1.AddressTypeIPv4, ep(gone))
	ofGonePort := agentSlice(ns, "app", "metrics", keep, discoveryv1.AddressTypeIPv4, ep(keep))
	ofGoneFamily := agentSlice(ns, "app", "http", keep, discoveryv1.AddressTypeIPv6, endpoint("p6", "u6", "fd00:10:244::5", keep, true))
	// Not ours: another manager's slice for the same Service name, on the gone node.
	foreign := agentSlice(ns, "app", "http", gone, discoveryv1.AddressTypeIPv4, ep(gone))
	foreign.Name = "app-foreign"
	foreign.Labels[discoveryv1.LabelManagedBy] = "someone-else.example.com"
	for _, s := range []*discoveryv1.EndpointSlice{kept, ofGoneNode, ofGonePort, ofGoneFamily, foreign} {
		if err := controlPlane.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := controlPlane.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gone}}); err != nil {
		t.Fatal(err)
	}
	exists := func(s *discoveryv1.EndpointSlice) (bool, error) {
		err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(s), &discoveryv1.EndpointSlice{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
	harness.Eventually(t, 20*time.Second, "stale slices deleted", func() error {
		for _, s := range []*discoveryv1.EndpointSlice{ofGoneNode, ofGonePort, ofGoneFamily} {
			if ok, err := exists(s); ok || err != nil {
				return fmt.Errorf("%s still exists (%v)", s.Name, err)
			}
		}
		return nil
	})
	for _, s := range []*discoveryv1.EndpointSlice{kept, foreign} {
		if ok, err := exists(s); !ok || err != nil {
			t.Errorf("%s was deleted (%v); it is live or not ours", s.Name, err)
		}
	}
}

func TestOnlyTheLeaderActs(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	opts := app.Options{
		LeaderElection: true, LeaderElectionNamespace: ns, LeaderElectionID: "swh-controller-test",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	first := startController(t, opts)
	lease := &coordinationv1.Lease{}
	var leader string
	harness.Eventually(t, 30*time.Second, "a leader is elected", func() error {
		if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "swh-controller-test"}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("no holder")
		}
		leader = *lease.Spec.HolderIdentity
		return nil
	})
	second := startController(t, opts)
	if err := controlPlane.Client.Create(ctx, newResource(ns, "one")); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "the leader creates the Service", func() error { _, err := getService(ctx, ns, "one"); return err })
	if w := second.counter(t, "swh_controller_service_writes_total", nil); w != 0 {
		t.Errorf("the standby replica wrote %v Services", w)
	}

	first.Stop() // releases the lease on the way out
	if err := controlPlane.Client.Create(ctx, newResource(ns, "two")); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the standby takes over", func() error {
		if _, err := getService(ctx, ns, "two"); err != nil {
			return err
		}
		if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "swh-controller-test"}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == leader {
			return fmt.Errorf("lease still held by the stopped leader %s", leader)
		}
		// The Service is readable before its writer has the answer and
		// counts the write.
		if w := second.counter(t, "swh_controller_service_writes_total", map[string]string{"result": "ok"}); w < 1 {
			return fmt.Errorf("the new leader wrote no Service")
		}
		return nil
	})
}
