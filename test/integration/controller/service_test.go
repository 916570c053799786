package controller_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

func TestChildServiceLifecycle(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	swh := newResource(ns, "web")
	swh.Labels = map[string]string{"team": "payments"}
	swh.Annotations = map[string]string{"note": "hello", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	var svc *corev1.Service
	harness.Eventually(t, 20*time.Second, "child Service created", func() (err error) {
		svc, err = getService(ctx, ns, "web")
		return err
	})
	if len(svc.Spec.Selector) != 0 {
		t.Errorf("child Service has selector %v; it must have none", svc.Spec.Selector)
	}
	ref := metav1.GetControllerOf(svc)
	if ref == nil || ref.UID != swh.UID || ref.Kind != "ServiceWithHealthchecks" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("owner reference %+v, want the resource as controller (the garbage collector deletes the Service with it)", ref)
	}
	if svc.Labels["team"] != "payments" || svc.Annotations["note"] != "hello" {
		t.Errorf("labels %v / annotations %v not propagated", svc.Labels, svc.Annotations)
	}
	if _, ok := svc.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Error("kubectl's last-applied annotation was copied to the Service")
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.Ports[0].TargetPort != intstr.FromInt32(8080) {
		t.Errorf("Service spec %+v", svc.Spec)
	}
	harness.Eventually(t, 20*time.Second, "status reports the Service", func() error {
		got := getResource(t, ctx, ns, "web")
		c := meta.FindStatusCondition(got.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
		if c == nil || c.Status != metav1.ConditionTrue || got.Status.ClusterIP != svc.Spec.ClusterIP || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})

	// Labels changed on the resource reach the Service; a removed label goes.
	updateResource(t, ctx, ns, "web", func(got *swhv1alpha1.ServiceWithHealthchecks) {
		got.Labels = map[string]string{"tier": "front"}
	})
	harness.Eventually(t, 20*time.Second, "labels follow", func() error {
		svc, err := getService(ctx, ns, "web")
		if err != nil {
			return err
		}
		if svc.Labels["tier"] != "front" || svc.Labels["team"] != "" {
			return fmt.Errorf("labels %v", svc.Labels)
		}
		return nil
	})
}

// TestServiceFieldsCarriedOver changes one field of the resource at a time
// and checks that the child Service follows.
func TestServiceFieldsCarriedOver(t *testing.T) {
	startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	tests := []struct {
		name   string
		mutate func(*swhv1alpha1.ServiceWithHealthchecksSpec)
		check  func(*corev1.ServiceSpec) error
	}{
		{"ports and target ports", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Ports = []swhv1alpha1.ServicePort{{Name: "http", Port: 81, TargetPort: intstr.FromString("web")}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}
		}, func(s *corev1.ServiceSpec) error {
			if len(s.Ports) != 2 || s.Ports[0].Port != 81 || s.Ports[0].TargetPort != intstr.FromString("web") || s.Ports[1].Protocol != corev1.ProtocolUDP || s.Ports[1].TargetPort != intstr.FromInt32(53) {
				return fmt.Errorf("ports %+v", s.Ports)
			}
			return nil
		}},
		{"app protocol", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.Ports[0].AppProtocol = new("kubernetes.io/h2c") },
			func(s *corev1.ServiceSpec) error { return expect(s.Ports[0].AppProtocol, new("kubernetes.io/h2c")) }},
		{"type NodePort with a node port", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = corev1.ServiceTypeNodePort
			s.Ports[0].NodePort = 30123
		}, func(s *corev1.ServiceSpec) error {
			return expect([]any{s.Type, s.Ports[0].NodePort}, []any{corev1.ServiceTypeNodePort, int32(30123)})
		}},
		{"external traffic policy", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = corev1.ServiceTypeNodePort
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}, func(s *corev1.ServiceSpec) error {
			return expect(s.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyLocal)
		}},
		{"type LoadBalancer with class, IP, ranges and health-check node port", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.Type = corev1.ServiceTypeLoadBalancer
			s.LoadBalancerClass = new("example.com/lb")
			s.LoadBalancerIP = "192.0.2.50"
			s.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.HealthCheckNodePort = 31555
			s.AllocateLoadBalancerNodePorts = new(true)
		}, func(s *corev1.ServiceSpec) error {
			return expect([]any{s.Type, s.LoadBalancerClass, s.LoadBalancerIP, s.LoadBalancerSourceRanges, s.HealthCheckNodePort, s.AllocateLoadBalancerNodePorts},
				[]any{corev1.ServiceTypeLoadBalancer, new("example.com/lb"), "192.0.2.50", []string{"192.0.2.0/24"}, int32(31555), new(true)})
		}},
		{"external IPs", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.ExternalIPs = []string{"192.0.2.60"} },
			func(s *corev1.ServiceSpec) error { return expect(s.ExternalIPs, []string{"192.0.2.60"}) }},
		{"session affinity and its config", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.SessionAffinity = corev1.ServiceAffinityClientIP
			s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(int32(300))}}
		}, func(s *corev1.ServiceSpec) error {
			if s.SessionAffinityConfig == nil || s.SessionAffinityConfig.ClientIP == nil {
				return fmt.Errorf("no session affinity config")
			}
			return expect([]any{s.SessionAffinity, s.SessionAffinityConfig.ClientIP.TimeoutSeconds}, []any{corev1.ServiceAffinityClientIP, new(int32(300))})
		}},
		{"internal traffic policy", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.InternalTrafficPolicy = new(corev1.ServiceInternalTrafficPolicyLocal)
		}, func(s *corev1.ServiceSpec) error {
			return expect(s.InternalTrafficPolicy, new(corev1.ServiceInternalTrafficPolicyLocal))
		}},
		{"publish not ready addresses", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.PublishNotReadyAddresses = true },
			func(s *corev1.ServiceSpec) error { return expect(s.PublishNotReadyAddresses, true) }},
		{"traffic distribution", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.TrafficDistribution = new("PreferClose") },
			func(s *corev1.ServiceSpec) error { return expect(s.TrafficDistribution, new("PreferClose")) }},
		{"IP family policy", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) {
			s.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
			s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}, func(s *corev1.ServiceSpec) error {
			return expect([]any{s.IPFamilyPolicy, s.IPFamilies}, []any{new(corev1.IPFamilyPolicySingleStack), []corev1.IPFamily{corev1.IPv4Protocol}})
		}},
		{"cluster IP chosen by the user", func(s *swhv1alpha1.ServiceWithHealthchecksSpec) { s.ClusterIP = "10.96.0.77" },
			func(s *corev1.ServiceSpec) error { return expect(s.ClusterIP, "10.96.0.77") }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("f%d", i)
			swh := newResource(ns, name)
			if tt.name == "cluster IP chosen by the user" {
				// A cluster IP can only be chosen at creation. (Deleting
				// and recreating the resource and its Service raced: the
				// controller, its cache still holding the old resource,
				// recreated the Service, and no garbage collector runs
				// here to remove it.)
				tt.mutate(&swh.Spec)
				if err := controlPlane.Client.Create(ctx, swh); err != nil {
					t.Fatal(err)
				}
			} else {
				// Created first with defaults, then changed: proves the update path.
				if err := controlPlane.Client.Create(ctx, swh); err != nil {
					t.Fatal(err)
				}
				harness.Eventually(t, 20*time.Second, "child Service created", func() error { _, err := getService(ctx, ns, name); return err })
				updateResource(t, ctx, ns, name, func(got *swhv1alpha1.ServiceWithHealthchecks) { tt.mutate(&got.Spec) })
			}
			harness.Eventually(t, 20*time.Second, "Service follows", func() error {
				svc, err := getService(ctx, ns, name)
				if err != nil {
					return err
				}
				return tt.check(&svc.Spec)
			})
		})
	}
}

func expect(got, want any) error {
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	return nil
}

// TestSteadyStateMakesNoWrites lets reconciles run against settled resources
// and checks that nothing is written: no Service apply, no status update,
// resource versions unchanged.
func TestSteadyStateMakesNoWrites(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	for i := range 5 {
		swh := newResource(ns, fmt.Sprintf("steady-%d", i))
		swh.Spec.Type = corev1.ServiceTypeLoadBalancer
		swh.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		swh.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if err := controlPlane.Client.Create(ctx, swh); err != nil {
			t.Fatal(err)
		}
	}
	versions := func() map[string]string {
		out := map[string]string{}
		svcs := &corev1.ServiceList{}
		swhs := &swhv1alpha1.ServiceWithHealthchecksList{}
		if err := controlPlane.Client.List(ctx, svcs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if err := controlPlane.Client.List(ctx, swhs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs.Items {
			out["svc/"+s.Name] = s.ResourceVersion
		}
		for _, s := range swhs.Items {
			out["swh/"+s.Name] = s.ResourceVersion
		}
		return out
	}
	harness.Eventually(t, 30*time.Second, "every resource settled", func() error {
		swhs := &swhv1alpha1.ServiceWithHealthchecksList{}
		if err := controlPlane.Client.List(ctx, swhs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, s := range swhs.Items {
			if s.Status.ClusterIP == "" {
				return fmt.Errorf("%s not settled", s.Name)
			}
		}
		return nil
	})
	writeCount := func() float64 {
		return c.counter(t, "swh_controller_service_writes_total", nil) + c.counter(t, "swh_controller_status_writes_total", nil)
	}
	// Settled: no write for two seconds (the creation's last reconciles done).
	writes := writeCount()
	for quiet := 0; quiet < 4; {
		time.Sleep(500 * time.Millisecond)
		if now := writeCount(); now != writes {
			writes, quiet = now, 0
			continue
		}
		quiet++
	}
	before := versions()
	reconciles := c.counter(t, "controller_runtime_reconcile_total", nil)

	// A node deletion makes the controller reconcile every resource.
	for i := range 3 {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%s-%d", ns, i)}}
		if err := controlPlane.Client.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		if err := controlPlane.Client.Delete(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Second)
	after := versions()
	if !reflect.DeepEqual(before, after) {
		t.Errorf("resource versions changed in steady state:\nbefore %v\nafter  %v", before, after)
	}
	if got := c.counter(t, "swh_controller_service_writes_total", nil) + c.counter(t, "swh_controller_status_writes_total", nil); got != writes {
		t.Errorf("%v writes in steady state, want 0 (Service ok %v error %v, status ok %v error %v)", got-writes,
			c.counter(t, "swh_controller_service_writes_total", map[string]string{"result": "ok"}),
			c.counter(t, "swh_controller_service_writes_total", map[string]string{"result": "error"}),
			c.counter(t, "swh_controller_status_writes_total", map[string]string{"result": "ok"}),
			c.counter(t, "swh_controller_status_writes_total", map[string]string{"result": "error"}))
	}
	if got := c.counter(t, "controller_runtime_reconcile_total", nil); got <= reconciles {
		t.Errorf("no reconcile ran during the steady period (%v before, %v after): the test proves nothing", reconciles, got)
	}
}
