package reconciler

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// The fake-client tests drive Reconcile through the branches where the API
// server answers with an error or where objects exist that are not the
// controller's, without an API server: the namespace suites in test/
// cover the same paths against a real one.

// fakeWorld is a Reconciler on a fake client, with what it recorded.
type fakeWorld struct {
	r      *Reconciler
	c      client.Client
	events *events.FakeRecorder
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := swhv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// newFakeWorld builds a Reconciler whose client (cache and API reader
// alike) holds objs and answers through funcs.
func newFakeWorld(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *fakeWorld {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithObjects(objs...).
		WithStatusSubresource(&swhv1alpha1.ServiceWithHealthchecks{}).
		WithReturnManagedFields().
		WithInterceptorFuncs(funcs).
		Build()
	rec := events.NewFakeRecorder(100)
	return &fakeWorld{
		r:      &Reconciler{Client: c, APIReader: c, Recorder: rec, FieldOwner: testOwner, reverts: newRevertLimiter()},
		c:      c,
		events: rec,
	}
}

// reconcile runs one pass for the resource web in ns.
func (w *fakeWorld) reconcile(t *testing.T) (ctrl.Result, error) {
	t.Helper()
	return w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}})
}

// resource reads the resource back.
func (w *fakeWorld) resource(t *testing.T) *swhv1alpha1.ServiceWithHealthchecks {
	t.Helper()
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "web"}, swh); err != nil {
		t.Fatal(err)
	}
	return swh
}

// service reads the Service web back; nil when there is none.
func (w *fakeWorld) service(t *testing.T) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "web"}, svc)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err != nil {
		return nil
	}
	return svc
}

// synced returns the resource's ServiceSynced condition; nil when unset.
func (w *fakeWorld) synced(t *testing.T) *metav1.Condition {
	t.Helper()
	return meta.FindStatusCondition(w.resource(t).Status.Conditions, swhv1alpha1.ConditionServiceSynced)
}

// drainEvents returns the events recorded so far ("type reason note").
func (w *fakeWorld) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-w.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// hasEvent reports whether one of the events starts with prefix.
func hasEvent(evs []string, prefix string) bool {
	for _, e := range evs {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// webResource is the resource web in ns: one port, a selector.
func webResource(annotations map[string]string) *swhv1alpha1.ServiceWithHealthchecks {
	return &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web", Generation: 1, Annotations: annotations},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports:    []swhv1alpha1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
			Selector: map[string]string{"app": "web"},
		},
	}
}

// plainService is a Service web in ns that the resource does not own, as
// kubectl made it: a selector, one port; controller names its controller
// ("" for none).
func plainService(controller string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-svc"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if controller != "" {
		yes := true
		svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: controller, UID: "uid-other", Controller: &yes}}
	}
	return svc
}

// builtinSlice is a slice of the built-in EndpointSlice controller for the
// Service web.
func builtinSlice() *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abcde", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: swhv1alpha1.BuiltinEndpointSliceManager}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
}

// webPod is a pod the resource web selects.
func webPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{"app": "web"}}}
}

func TestFakeWorldCreatesTheService(t *testing.T) {
	w := newFakeWorld(t, interceptor.Funcs{}, webResource(nil))
	if _, err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	svc := w.service(t)
	if svc == nil || !ownedBy(svc, webResource(nil)) || len(svc.Spec.Selector) != 0 {
		t.Fatalf("Service %+v: want one owned by the resource, with no selector", svc)
	}
	if c := w.synced(t); c == nil || c.Reason != swhv1alpha1.ReasonSynced {
		t.Fatalf("ServiceSynced %+v, want %s", c, swhv1alpha1.ReasonSynced)
	}
}
