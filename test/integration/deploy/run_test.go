package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentapp "github.com/swh-dev/swh/agent/app"
	"github.com/swh-dev/swh/agent/publisher"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	controllerapp "github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// startController runs swh-controller with cfg as the binary does in the
// cluster (leader election in swh-system) until the test ends.
func startController(t *testing.T, cfg *rest.Config) {
	t.Helper()
	mgr, err := controllerapp.NewManager(cfg, controllerapp.Options{
		MetricsAddr: "0", HealthAddr: "0", Registry: prometheus.NewRegistry(), SkipNameValidation: true,
		LeaderElection: true, LeaderElectionNamespace: namespace,
		LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		AgentServiceAccount: types.NamespacedName{Namespace: namespace, Name: agentSA},
	})
	if err != nil {
		t.Fatalf("creating the controller: %v", err)
	}
	harness.StartManager(context.Background(), t, "the controller", mgr)
}

// noForbidden fails the test if the API server refused any request.
func noForbidden(t *testing.T, sa string, log *forbiddenLog) {
	t.Helper()
	if seen := log.requests(); len(seen) > 0 {
		t.Errorf("the API server refused %d requests of %s:\n%s", len(seen), sa, strings.Join(seen, "\n"))
	}
}

// TestControllerAsServiceAccount runs the controller as its ServiceAccount
// with leader election on, through a new child Service and an adoption
// (selector removed, the built-in slices and Endpoints deleted) under
// OwnerReferencesPermissionEnforcement, and a selector someone added, and
// fails on any 403.
func TestControllerAsServiceAccount(t *testing.T) {
	installRBAC(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := controlPlane.Client
	ns := controlPlane.CleanNamespace(t)

	// A Service to adopt, as the built-in controllers left it.
	old := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "adopted"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "adopted"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	builtin := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "adopted-abcde", Labels: map[string]string{
			discoveryv1.LabelServiceName: "adopted", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	//lint:ignore SA1019 what the built-in Endpoints controller leaves
	eps := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "adopted", Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
	}
	for _, o := range []client.Object{old, builtin, eps} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	cfg, forbidden := impersonating(controllerSA)
	startController(t, cfg)

	fresh := resource(ns, "fresh")
	adopted := resource(ns, "adopted")
	adopted.Annotations = map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	for _, o := range []client.Object{fresh, adopted} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"fresh", "adopted"} {
		harness.Eventually(t, time.Minute, name+" synced", func() error {
			swh := &swhv1alpha1.ServiceWithHealthchecks{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swh); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != swhv1alpha1.ReasonSynced {
				return fmt.Errorf("condition %v", cond)
			}
			svc := &corev1.Service{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
				return err
			}
			if len(svc.Spec.Selector) > 0 {
				return fmt.Errorf("the Service still has the selector %v", svc.Spec.Selector)
			}
			return nil
		})
	}
	for _, o := range []client.Object{builtin, eps} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s not deleted by the adoption (%v)", o, o.GetName(), err)
		}
	}
	// Someone adds a selector to a child Service: the controller removes it.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"selector":{"app":"fresh"}}}`))
	if err := c.Patch(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fresh"}}, patch, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, "the selector someone added removed", func() error {
		svc := &corev1.Service{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fresh"}, svc); err != nil {
			return err
		}
		if len(svc.Spec.Selector) > 0 {
			return fmt.Errorf("selector %v", svc.Spec.Selector)
		}
		return nil
	})

	harness.Eventually(t, 30*time.Second, "the controller holds the Lease and recorded it", func() error {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "swh-controller"}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("no holder")
		}
		events := &corev1.EventList{}
		if err := c.List(ctx, events, client.InNamespace(namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == "LeaderElection" && e.InvolvedObject.Kind == "Lease" {
				return nil
			}
		}
		return errors.New("no LeaderElection event in " + namespace)
	})
	noForbidden(t, controllerSA, forbidden)
}

// TestAgentAsServiceAccount runs the agent (and the controller) as their
// ServiceAccounts, the agent with the token of its pod on its node and the
// chart's admission policies enforced: the agent probes a real server on a
// pod address and publishes the pod in an EndpointSlice, reads a
// PostgreSQL probe's Secret by name, and records events, with no 403.
func TestAgentAsServiceAccount(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	installRBAC(t)
	installAgentPolicies(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := controlPlane.Client
	ns := controlPlane.CleanNamespace(t)
	const node = "deploy-node"
	// web-0 answers on ips[0]; nothing listens on db-0's ips[1].
	ips := harness.PodIPs(t, 2)
	ip := ips[0]

	agentCfg := bearer(agentToken(ctx, t, node, "swh-agent-"))
	agentUser, agentGroups := serviceAccountUser(agentSA)
	agentForbidden := recordRefused(agentCfg)
	srv, err := harness.StartTCPServer(ip + ":8080")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if _, err := harness.CreatePod(ctx, c, harness.PodOptions{Namespace: ns, Name: "web-0", Node: node,
		Labels: map[string]string{"app": "web"}, IPs: []string{ip},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}); err != nil {
		t.Fatal(err)
	}

	ctrlCfg, ctrlForbidden := impersonating(controllerSA)
	startController(t, ctrlCfg)

	// A PostgreSQL probe reads its credentials Secret by name before it
	// connects (nothing listens on db-0: the pod is published not ready).
	if _, err := harness.CreatePod(ctx, c, harness.PodOptions{Namespace: ns, Name: "db-0", Node: node,
		Labels: map[string]string{"app": "db"}, IPs: []string{ips[1]},
		Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 8080}}}); err != nil {
		t.Fatal(err)
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"},
		StringData: map[string]string{"user": "probe", "password": "secret"}}
	db := resource(ns, "db")
	db.Spec.Healthcheck.Probes = []swhv1alpha1.Probe{{
		Mode: swhv1alpha1.ProbeModePostgreSQL, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
		PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromInt32(8080), AuthSecretName: creds.Name},
	}}
	for _, o := range []client.Object{creds, resource(ns, "web"), db} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The agent starts once the controller registered both Services and
	// granted the Secret: from then on, not one of its requests is refused.
	// (Before, its writes would be, and retried: a race the e2e suite runs.)
	harness.Eventually(t, time.Minute, "the controller registers the Services and grants the Secret", func() error {
		registered := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: servicesConfigMap}, registered); err != nil {
			return err
		}
		for _, svc := range []string{"web", "db"} {
			if _, ok := registered.Data[svc]; !ok {
				return fmt.Errorf("%s not in %s: %v", svc, servicesConfigMap, registered.Data)
			}
		}
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: agentUser, Groups: agentGroups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "get", Resource: "secrets", Namespace: ns, Name: creds.Name,
			},
		}}
		if err := c.Create(ctx, review); err != nil {
			return err
		}
		if !review.Status.Allowed {
			return fmt.Errorf("the agent may not get Secret %s yet", creds.Name)
		}
		return nil
	})
	registry := prometheus.NewRegistry()
	mgr, err := agentapp.NewManager(agentCfg, agentapp.Options{
		NodeName: node, MetricsAddr: "0", HealthAddr: "0", Registry: registry,
		Publisher: publisher.Options{SkipNameValidation: true},
	})
	if err != nil {
		t.Fatalf("creating the agent: %v", err)
	}
	harness.StartManager(context.Background(), t, "the agent", mgr)

	for _, want := range []struct {
		service, pod string
		ready        bool
	}{{"web", "web-0", true}, {"db", "db-0", false}} {
		harness.Eventually(t, time.Minute, fmt.Sprintf("the agent publishes %s with ready=%v", want.pod, want.ready), func() error {
			list := &discoveryv1.EndpointSliceList{}
			if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: want.service}); err != nil {
				return err
			}
			for _, s := range list.Items {
				for _, ep := range s.Endpoints {
					if ep.TargetRef != nil && ep.TargetRef.Name == want.pod && ep.Conditions.Ready != nil && *ep.Conditions.Ready == want.ready {
						return nil
					}
				}
			}
			return fmt.Errorf("%d slices, %s not in them with ready=%v", len(list.Items), want.pod, want.ready)
		})
	}
	harness.Eventually(t, 30*time.Second, "a PostgreSQL probe got past reading its Secret", func() error {
		families, err := registry.Gather()
		if err != nil {
			return err
		}
		for _, f := range families {
			if f.GetName() != "swh_agent_probe_results_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if strings.EqualFold(labels["mode"], string(swhv1alpha1.ProbeModePostgreSQL)) && m.GetCounter().GetValue() > 0 {
					if labels["reason"] == string(publisher.ReasonSecret) {
						return fmt.Errorf("the probe failed reading its Secret: %v", labels)
					}
					return nil
				}
			}
		}
		return errors.New("no PostgreSQL probe result yet")
	})
	harness.Eventually(t, 30*time.Second, "the agent records an event", func() error {
		list := &corev1.EventList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.ReportingController == "swh-agent" || e.Source.Component == "swh-agent" {
				return nil
			}
		}
		return fmt.Errorf("%d events, none from swh-agent", len(list.Items))
	})
	noForbidden(t, agentSA, agentForbidden)
	noForbidden(t, controllerSA, ctrlForbidden)
}

// resource returns a resource selecting app=name with one TCP-probed port.
func resource(ns, name string) *swhv1alpha1.ServiceWithHealthchecks {
	return &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:    []swhv1alpha1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
			Selector: map[string]string{"app": name},
			Healthcheck: &swhv1alpha1.Healthcheck{PeriodSeconds: 1, Probes: []swhv1alpha1.Probe{{
				Mode: swhv1alpha1.ProbeModeTCP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
				TCP: &swhv1alpha1.TCPProbe{TargetPort: intstr.FromInt32(8080)},
			}}},
		},
	}
}
