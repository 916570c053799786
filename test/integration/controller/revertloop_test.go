package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

// serviceWrites counts the controller's writes of child Services.
func serviceWrites(t *testing.T, c *controller) float64 {
	t.Helper()
	return c.counter(t, "swh_controller_service_writes_total", nil)
}

// writesOver returns how many Service writes the controller makes in d.
func writesOver(t *testing.T, c *controller, d time.Duration) float64 {
	t.Helper()
	before := serviceWrites(t, c)
	time.Sleep(d)
	return serviceWrites(t, c) - before
}

// waitDrifted waits for ServiceSynced=False/ServiceDrifted naming field,
// and its event.
func waitDrifted(t *testing.T, ctx context.Context, ns, name, field string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, "the fight reported", func() error {
		c, err := condition(t, ctx, ns, name)()
		if err != nil {
			return err
		}
		if c.Status != metav1.ConditionFalse || c.Reason != swhv1alpha1.ReasonServiceDrifted || !strings.Contains(c.Message, field) {
			return fmt.Errorf("condition %+v", c)
		}
		note, err := eventNote(ctx, ns, name, swhv1alpha1.ReasonServiceDrifted)
		if err != nil {
			return err
		}
		if !strings.Contains(note, field) {
			return fmt.Errorf("event note %q does not name %s", note, field)
		}
		return nil
	})
}

// TestMutatingAdmissionIsNotFought: a mutating admission policy sets
// publishNotReadyAddresses on every write of the Services of a namespace.
// Each patch that removes it comes back with it, and each would wake the
// controller for another: an endless loop of writes that every kube-proxy
// receives. The controller sees that its patch did not stick, stops, and
// says so; once the policy is gone and the Service changes, it puts the
// field back.
func TestMutatingAdmissionIsNotFought(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	if err := controlPlane.Client.Create(ctx, newResource(ns, "mutated")); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "mutated")

	name := "swh-test-" + ns
	scope := &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
	policy := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionv1.MutatingAdmissionPolicySpec{
		MatchConstraints: &admissionv1.MatchResources{
			NamespaceSelector: scope.NamespaceSelector,
			ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
			}}},
		},
		FailurePolicy:      new(admissionv1.Fail),
		ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionv1.ApplyConfiguration{
			Expression: "Object{spec: Object.spec{publishNotReadyAddresses: true}}",
		}}},
	}}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name, MatchResources: scope}}
	for _, o := range []client.Object{policy, binding} {
		if err := controlPlane.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating the %T (is admissionregistration.k8s.io/v1 served?): %v", o, err)
		}
	}
	removePolicy := func() {
		for _, o := range []client.Object{binding, policy} {
			_ = client.IgnoreNotFound(controlPlane.Client.Delete(context.Background(), o))
		}
	}
	t.Cleanup(removePolicy)
	// The policy takes effect once the API server's informers have it: a
	// harmless edit of the Service shows when.
	tries := 0
	harness.Eventually(t, 10*time.Second, "the mutating admission policy takes effect", func() error {
		var svc *corev1.Service
		tries++
		editService(t, ctx, ns, "mutated", func(s *corev1.Service) {
			s.Labels["edit"] = fmt.Sprint(tries)
			svc = s
		})
		if !svc.Spec.PublishNotReadyAddresses {
			return fmt.Errorf("not yet, after %d edits", tries)
		}
		return nil
	})

	time.Sleep(time.Second)
	if n := writesOver(t, c, 5*time.Second); n > 1 {
		t.Errorf("%v writes of the Service in 5 s against a mutating admission policy, want at most 1", n)
	}
	waitDrifted(t, ctx, ns, "mutated", "publishNotReadyAddresses")
	svc, err := getService(ctx, ns, "mutated")
	if err != nil {
		t.Fatal(err)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Fatal("the policy did not hold the field: the test proves nothing")
	}

	// The policy goes; the Service changes: the field is put back.
	removePolicy()
	edits := 0
	harness.Eventually(t, 30*time.Second, "put back once the policy is gone and the Service changed", func() error {
		edits++
		editService(t, ctx, ns, "mutated", func(s *corev1.Service) { s.Labels["edit"] = fmt.Sprint("after-", edits) })
		svc, err := getService(ctx, ns, "mutated")
		if err != nil {
			return err
		}
		if svc.Spec.PublishNotReadyAddresses {
			return fmt.Errorf("publishNotReadyAddresses still true")
		}
		return nil
	})
	waitSynced(t, ctx, ns, "mutated")
}

// fight re-adds publishNotReadyAddresses to the Service after every write
// that removed it, as a policy engine with a watch would, until the test
// ends or stop is called.
func fight(t *testing.T, ns, name string) (stop func()) {
	t.Helper()
	wc, err := client.NewWithWatch(controlPlane.Config, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &corev1.ServiceList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			svc, ok := ev.Object.(*corev1.Service)
			if !ok || ev.Type != watch.Modified || svc.Name != name || svc.Spec.PublishNotReadyAddresses {
				continue
			}
			svc.Spec.PublishNotReadyAddresses = true
			// A conflict: a newer version is on its way.
			_ = controlPlane.Client.Update(context.Background(), svc, client.FieldOwner("policy-engine"))
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { w.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TestRevertFightIsBounded: another controller re-adds a field right after
// each revert. The reverts of that field slow down (at most one per field
// per interval, the interval doubling), the status says so, and once the
// other side stops the field is put back.
func TestRevertFightIsBounded(t *testing.T) {
	c := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	if err := controlPlane.Client.Create(ctx, newResource(ns, "fought")); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, ctx, ns, "fought")
	stop := fight(t, ns, "fought")
	editService(t, ctx, ns, "fought", func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true })
	// Put back at once, then 1 s, 2 s, 4 s later: at most 4 times in the
	// first 8 s (5 with a scheduling hiccup).
	if n := writesOver(t, c, 8*time.Second); n > 5 {
		t.Errorf("%v writes of the Service in 8 s against a field someone re-adds at once, want at most 5", n)
	}
	waitDrifted(t, ctx, ns, "fought", "publishNotReadyAddresses")
	stop()
	harness.Eventually(t, 40*time.Second, "put back once the fight stopped", func() error {
		svc, err := getService(ctx, ns, "fought")
		if err != nil {
			return err
		}
		if svc.Spec.PublishNotReadyAddresses {
			return fmt.Errorf("publishNotReadyAddresses still true")
		}
		return nil
	})
	waitSynced(t, ctx, ns, "fought")
}
