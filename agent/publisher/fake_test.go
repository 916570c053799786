package publisher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// The fake-client tests drive Reconcile through the branches where the API
// server answers a slice write with an error, or where slices exist that
// the publisher did not write, without an API server: the namespace suites
// in test/ cover the same paths against a real one. The probe scheduler is
// never run: targets keep the state they start with.

const testNode = "node-a"

var testKey = types.NamespacedName{Namespace: "ns", Name: "web"}

// sliceFaults makes slice writes fail: an operation ("create", "update",
// "delete") answers with its error, every time or only the first.
type sliceFaults struct {
	mu   sync.Mutex
	errs map[string]error
	once bool
	// landed makes the write first, then answers with the error: an
	// update committed before its answer timed out.
	landed bool
	calls  map[string]int
}

func (f *sliceFaults) set(op string, err error, once bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs, f.once, f.landed = map[string]error{op: err}, once, false
}

// setLanded makes the next op write, then answer err.
func (f *sliceFaults) setLanded(op string, err error) {
	f.set(op, err, true)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.landed = true
}

func (f *sliceFaults) clear() { f.set("", nil, false) }

// answer counts a write of a slice and returns its injected error, and
// whether the write is made first.
func (f *sliceFaults) answer(op string, obj client.Object) (error, bool) {
	if _, ok := obj.(*discoveryv1.EndpointSlice); !ok {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	err := f.errs[op]
	if f.once {
		delete(f.errs, op)
	}
	return err, f.landed && err != nil
}

// write answers a write of the fake API server as f says.
func (f *sliceFaults) write(op string, obj client.Object, do func() error) error {
	err, landed := f.answer(op, obj)
	switch {
	case err == nil:
		return do()
	case landed:
		// The answer is lost: the caller's object stays as it sent it.
		sent := obj.DeepCopyObject().(client.Object)
		if werr := do(); werr != nil {
			return werr
		}
		obj.SetResourceVersion(sent.GetResourceVersion())
	}
	return err
}

func (f *sliceFaults) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return f.write("create", obj, func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return f.write("update", obj, func() error { return c.Update(ctx, obj, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return f.write("delete", obj, func() error { return c.Delete(ctx, obj, opts...) })
		},
	}
}

// fakeWorld is a Publisher of node-a on a fake client, with what it
// recorded.
type fakeWorld struct {
	p       *Publisher
	c       client.Client
	faults  *sliceFaults
	metrics *Metrics
	events  *events.FakeRecorder
	logMu   sync.Mutex
	logs    []string
}

func newFakeWorld(t *testing.T, objs ...client.Object) *fakeWorld {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := swhv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	w := &fakeWorld{faults: &sliceFaults{}, events: events.NewFakeRecorder(1000)}
	w.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(w.faults.funcs()).Build()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w.metrics = m
	w.p, err = New(testNode, Options{}, Deps{Client: w.c, APIReader: w.c, Recorder: w.events, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// reconcile runs one pass for web, logging at V(1) into w.logs.
func (w *fakeWorld) reconcile(t *testing.T) error {
	t.Helper()
	logger := funcr.New(func(prefix, args string) {
		w.logMu.Lock()
		defer w.logMu.Unlock()
		w.logs = append(w.logs, args)
	}, funcr.Options{Verbosity: 1})
	res, err := w.p.Reconcile(log.IntoContext(context.Background(), logger), ctrl.Request{NamespacedName: testKey})
	if res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter %v: the publisher requeues through errors", res.RequeueAfter)
	}
	return err
}

// logged reports whether a log line holds s.
func (w *fakeWorld) logged(s string) bool {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	for _, l := range w.logs {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// writes returns how often a write of op was counted with outcome.
func (w *fakeWorld) writes(op, outcome string) float64 {
	return testutil.ToFloat64(w.metrics.sliceWrites.WithLabelValues(op, outcome))
}

// slice reads a slice; nil when there is none.
func (w *fakeWorld) slice(t *testing.T, name string) *discoveryv1.EndpointSlice {
	t.Helper()
	s := &discoveryv1.EndpointSlice{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, s); err != nil {
		if client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		return nil
	}
	return s
}

// readiness says how a slice publishes web-1: "absent" (no slice),
// "none" (not in it), "ready" or "not ready".
func (w *fakeWorld) readiness(t *testing.T, name string) string {
	t.Helper()
	s := w.slice(t, name)
	if s == nil {
		return "absent"
	}
	for _, ep := range s.Endpoints {
		if ep.TargetRef != nil && ep.TargetRef.Name == "web-1" {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				return "ready"
			}
			return "not ready"
		}
	}
	return "none"
}

// setPodReady sets the Ready condition of web-1.
func (w *fakeWorld) setPodReady(t *testing.T, ready bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "web-1"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = podConditions(ready)
	if err := w.c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// setServicePorts replaces the ports of the child Service.
func (w *fakeWorld) setServicePorts(t *testing.T, names ...string) {
	t.Helper()
	svc := &corev1.Service{}
	if err := w.c.Get(context.Background(), testKey, svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports = servicePorts(names...)
	if err := w.c.Update(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
}

// The objects of the tests: the resource web (optionally with a TCP probe
// of 8080 and annotations), its Service with the named ports, node-a, and
// web-1 on node-a.

func webResource(probe bool, annotations map[string]string) *swhv1alpha1.ServiceWithHealthchecks {
	swh := &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web", Generation: 1, Annotations: annotations},
		Spec:       swhv1alpha1.ServiceWithHealthchecksSpec{Selector: map[string]string{"app": "web"}},
	}
	if probe {
		swh.Spec.Healthcheck = &swhv1alpha1.Healthcheck{PeriodSeconds: 10, Probes: []swhv1alpha1.Probe{{
			Mode: swhv1alpha1.ProbeModeTCP, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
			TCP: &swhv1alpha1.TCPProbe{TargetPort: intstr.FromInt32(8080)},
		}}}
	}
	return swh
}

func servicePorts(names ...string) []corev1.ServicePort {
	ports := make([]corev1.ServicePort, len(names))
	for i, name := range names {
		ports[i] = corev1.ServicePort{Name: name, Port: int32(80 + i), Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(8080 + i))}
	}
	return ports
}

func webService(ports ...string) *corev1.Service {
	yes := true
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-svc",
			Labels: map[string]string{swhv1alpha1.LabelService: "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: swhv1alpha1.GroupVersion.String(), Kind: "ServiceWithHealthchecks",
				Name: "web", UID: "uid-web", Controller: &yes}}},
		Spec: corev1.ServiceSpec{Ports: servicePorts(ports...), IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}},
	}
}

func testNodeObject() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func podConditions(ready bool) []corev1.PodCondition {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
}

func webPod(ready bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1", UID: "uid-web-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "app",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 8081}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.5", PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}},
			Conditions: podConditions(ready)},
	}
}

// sliceName is the name of web's slice of a port on node-a.
func sliceName(t *testing.T, port string) string {
	t.Helper()
	name, err := endpoints.SliceName(endpoints.NameParts{Service: "web", Port: port, Node: testNode})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// describe helps failure messages.
func describe(s *discoveryv1.EndpointSlice) string {
	if s == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s labels %v endpoints %d", s.Name, s.Labels, len(s.Endpoints))
}

// drainEvents returns the events recorded since the last call.
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
