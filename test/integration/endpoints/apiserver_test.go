// Package endpoints_test checks the endpoints library against a real
// kube-apiserver: every kind of slice it builds is accepted, reads back
// equal, and a second sync plans nothing.
package endpoints_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

func pod(ns, name, node string, ips []string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func TestSlicesRoundTripThroughAPIServer(t *testing.T) {
	cp := harness.StartTestControlPlane(t)
	ctx := context.Background()
	ns := cp.TestNamespace(t)
	c := cp.Client
	longNode := strings.Repeat("n", 120) + "." + strings.Repeat("m", 132)
	for _, tc := range []struct {
		name  string
		svc   corev1.Service
		node  string
		nPods int
		named bool
		proxy string
	}{
		{name: "single", svc: corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, node: "node-a", nPods: 3},
		{name: "multi", svc: corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), AppProtocol: new("kubernetes.io/h2c")},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}, node: "node-a", nPods: 5, named: true, proxy: "other-proxy"},
		{name: "dual", svc: corev1.Service{Spec: corev1.ServiceSpec{IPFamilyPolicy: new(corev1.IPFamilyPolicyPreferDualStack),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, node: "node-a", nPods: 2},
		{name: "headless", svc: corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "None",
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, node: longNode, nPods: 1100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.svc
			svc.Name, svc.Namespace = tc.name, ns
			if tc.proxy != "" {
				svc.Labels = map[string]string{endpoints.LabelServiceProxyName: tc.proxy}
			}
			if err := c.Create(ctx, &svc); err != nil {
				t.Fatal(err)
			}
			t.Logf("service families %v clusterIP %q", svc.Spec.IPFamilies, svc.Spec.ClusterIP)
			g, err := endpoints.NewGrouping(svc.Spec.Ports, []intstr.IntOrString{intstr.FromInt32(8080)})
			if err != nil {
				t.Fatal(err)
			}
			var pods []endpoints.PodVerdicts
			for i := range tc.nPods {
				opts := []func(*corev1.Pod){}
				if tc.named && i%2 == 1 {
					opts = append(opts, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 8081 })
				}
				if i%3 == 2 {
					opts = append(opts, func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now })
				}
				if i%4 == 3 {
					opts = append(opts, func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = fmt.Sprintf("h%d", i), tc.name })
				}
				p := pod(ns, fmt.Sprintf("p%d", i), tc.node, []string{fmt.Sprintf("10.244.%d.%d", i/200, i%200+1), fmt.Sprintf("fd00:10:244::%x", i+1)}, opts...)
				pods = append(pods, endpoints.PodVerdicts{Pod: p, Ports: g.Verdicts(p, endpoints.ProbeSetOf(i%2))})
			}
			node := endpoints.Node{Name: tc.node, Zone: "zone-1"}
			desired, err := endpoints.Build(endpoints.ServiceFrom(&svc), node, pods, endpoints.Options{})
			if err != nil {
				t.Fatal(err)
			}
			scope := endpoints.Scope{Namespace: ns, Service: svc.Name, Node: tc.node}
			list := func() []discoveryv1.EndpointSlice {
				var l discoveryv1.EndpointSliceList
				if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
					t.Fatal(err)
				}
				return l.Items
			}
			applyCh := func(ch endpoints.Changes) {
				for i := range ch.Create {
					if err := c.Create(ctx, &ch.Create[i]); err != nil {
						t.Fatalf("create %s: %v", ch.Create[i].Name, err)
					}
				}
				for i := range ch.Update {
					if err := c.Update(ctx, &ch.Update[i]); err != nil {
						t.Fatalf("update %s: %v", ch.Update[i].Name, err)
					}
				}
				for i := range ch.Delete {
					if err := c.Delete(ctx, &ch.Delete[i]); err != nil {
						t.Fatalf("delete %s: %v", ch.Delete[i].Name, err)
					}
				}
			}
			ch, err := endpoints.Plan(scope, list(), desired, endpoints.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("create %d slices", len(ch.Create))
			for _, s := range ch.Create {
				t.Logf("  %s %s %d endpoints", s.Name, s.AddressType, len(s.Endpoints))
			}
			applyCh(ch)
			got := list()
			for i := range desired {
				found := false
				for j := range got {
					if got[j].Name == desired[i].Name {
						found = true
						if !endpoints.UpToDate(&got[j], &desired[i]) {
							t.Errorf("%s read back differs", desired[i].Name)
						}
					}
				}
				if !found {
					t.Errorf("%s missing", desired[i].Name)
				}
			}
			again, err := endpoints.Plan(scope, got, desired, endpoints.Options{})
			if err != nil || !again.Empty() {
				t.Fatalf("second sync writes: %+v %v", again, err)
			}
			// Change verdicts: every pod passes now; one pod gone.
			pods = pods[1:]
			for i := range pods {
				pods[i].Ports = g.Verdicts(pods[i].Pod, endpoints.ProbeSetOf(0, 1))
			}
			desired, err = endpoints.Build(endpoints.ServiceFrom(&svc), node, pods, endpoints.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ch, err = endpoints.Plan(scope, list(), desired, endpoints.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("update: %d create %d update %d delete", len(ch.Create), len(ch.Update), len(ch.Delete))
			applyCh(ch)
			again, err = endpoints.Plan(scope, list(), desired, endpoints.Options{})
			if err != nil || !again.Empty() {
				t.Fatalf("sync after update writes: %+v %v", again, err)
			}
		})
	}
	// A collision with a foreign slice holding the name.
	t.Run("collision", func(t *testing.T) {
		svc := corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "b-c", Port: 80}}}}
		if err := c.Create(ctx, &svc); err != nil {
			t.Fatal(err)
		}
		p := pod(ns, "x", "node-a", []string{"10.244.9.1"})
		desired, err := endpoints.Build(endpoints.ServiceFrom(&svc), endpoints.Node{Name: "node-a"},
			[]endpoints.PodVerdicts{{Pod: p, Ports: []endpoints.PortVerdict{{Port: 80, Passing: true}}}}, endpoints.Options{})
		if err != nil {
			t.Fatal(err)
		}
		holder := desired[0].DeepCopy()
		holder.Labels[discoveryv1.LabelServiceName] = "a-b"
		holder.OwnerReferences = nil
		if err := c.Create(ctx, holder); err != nil {
			t.Fatal(err)
		}
		scope := endpoints.Scope{Namespace: ns, Service: "a", Node: "node-a"}
		// Listing by service-name does not see the holder; the create fails.
		ch, _ := endpoints.Plan(scope, nil, desired, endpoints.Options{})
		if err := c.Create(ctx, &ch.Create[0]); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating over the foreign holder: %v, want AlreadyExists", err)
		}
		var h discoveryv1.EndpointSlice
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ch.Create[0].Name}, &h); err != nil {
			t.Fatal(err)
		}
		ch, _ = endpoints.Plan(scope, []discoveryv1.EndpointSlice{h}, desired, endpoints.Options{})
		if len(ch.Collisions) != 1 || len(ch.Update) != 0 || len(ch.Delete) != 0 {
			t.Fatalf("plan with the foreign holder: %+v; want one collision and no write to the holder", ch)
		}
		if err := c.Create(ctx, &ch.Create[0]); err != nil {
			t.Fatalf("creating under the alternative name %s: %v", ch.Create[0].Name, err)
		}
		var after discoveryv1.EndpointSlice
		if err := c.Get(ctx, client.ObjectKeyFromObject(holder), &after); err != nil || after.ResourceVersion != h.ResourceVersion {
			t.Fatalf("the foreign holder changed (%v)", err)
		}
	})
}
