package disruption

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// The guard's branches that need no API server's behaviour: what it lets
// through at once, and that it answers 429, never an error the API server
// turns into 500 (kubectl drain gives up on a 500), when it cannot decide.
// test/integration/disruption covers the decisions against a real API server.

func fakeGuard(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *Guard {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := swhv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&swhv1alpha1.ServiceWithHealthchecks{}).WithInterceptorFuncs(funcs).Build()
	return &Guard{Sources: Sources{Cache: c, APIReader: c, Scales: c}, Client: c}
}

func evictionRequest(pod string, body string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, SubResource: "eviction", Namespace: "kafka", Name: pod,
		Object: runtime.RawExtension{Raw: []byte(body)},
	}}
}

func TestGuardShortcuts(t *testing.T) {
	budgeted := resource(swhv1alpha1.DisruptionBudget{MinAvailable: ptr.To(intstr.FromInt32(3))})
	running := broker("b-0", "n0")
	running.Labels = map[string]string{"app": "kafka"}
	pending := running.DeepCopy()
	pending.Name, pending.Status.Phase = "b-1", corev1.PodPending
	other := running.DeepCopy()
	other.Name, other.Labels = "web-0", map[string]string{"app": "web"}
	failing := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Pod); ok {
			return errors.New("the API server is away")
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	tests := []struct {
		name    string
		funcs   interceptor.Funcs
		pod     string
		allowed bool
		code    int32
	}{
		{name: "a pod no budget selects", pod: "web-0", allowed: true},
		{name: "a Pending pod", pod: "b-1", allowed: true},
		{name: "a pod that is gone", pod: "b-9", allowed: true},
		{name: "a budget that allows nothing", pod: "b-0", code: http.StatusTooManyRequests},
		{name: "the API server failing", funcs: failing, pod: "b-0", code: http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := fakeGuard(t, tt.funcs, budgeted, running.DeepCopy(), pending, other)
			resp := g.Handle(context.Background(), evictionRequest(tt.pod, `{"apiVersion":"policy/v1","kind":"Eviction"}`))
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && (resp.Result == nil || resp.Result.Code != tt.code || resp.Result.Reason != metav1.StatusReasonTooManyRequests) {
				t.Errorf("result = %+v, want code %d TooManyRequests", resp.Result, tt.code)
			}
		})
	}
}

func TestIsDryRun(t *testing.T) {
	tests := []struct {
		name string
		req  admission.Request
		want bool
	}{
		{"no dry run", evictionRequest("p", `{"kind":"Eviction"}`), false},
		{"in the request", func() admission.Request {
			r := evictionRequest("p", `{"kind":"Eviction"}`)
			r.DryRun = ptr.To(true)
			return r
		}(), true},
		{"in deleteOptions only (kubectl drain --dry-run=server)", evictionRequest("p", `{"kind":"Eviction","deleteOptions":{"dryRun":["All"]}}`), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := isDryRun(tt.req)
			if err != nil || got != tt.want {
				t.Errorf("isDryRun = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestReleaseWhenAnotherBudgetRefuses: budget a allows the eviction and
// reserves the pod, budget b refuses it; a's reservation is given back.
func TestReleaseWhenAnotherBudgetRefuses(t *testing.T) {
	a := resource(swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}})
	a.Name = "a"
	b := resource(swhv1alpha1.DisruptionBudget{MinAvailable: ptr.To(intstr.FromInt32(3)), Ports: []string{"client"}})
	b.Name = "b"
	objs := []client.Object{a, b}
	for i, name := range []string{"b-0", "b-1", "b-2"} {
		objs = append(objs, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
		p := broker(name, fmt.Sprintf("n%d", i))
		p.Labels = map[string]string{"app": "kafka"}
		objs = append(objs, &p)
	}
	for _, owner := range []string{"a", "b"} {
		for _, s := range slice("client", map[string]bool{"b-0": true, "b-1": true, "b-2": true}) {
			s.Namespace, s.Name = "kafka", owner+"-"+s.Name
			s.Labels[discoveryv1.LabelServiceName] = owner
			s.AddressType = discoveryv1.AddressTypeIPv4
			objs = append(objs, &s)
		}
	}
	g := fakeGuard(t, interceptor.Funcs{}, objs...)
	resp := g.Handle(context.Background(), evictionRequest("b-0", `{"kind":"Eviction"}`))
	if resp.Allowed || resp.Result.Code != http.StatusTooManyRequests || !strings.Contains(resp.Result.Message, "kafka/b") {
		t.Fatalf("answer %+v, want b's 429", resp.Result)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		cur := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := g.Client.Get(context.Background(), client.ObjectKey{Namespace: "kafka", Name: "a"}, cur); err != nil {
			t.Fatal(err)
		}
		st := cur.Status.Disruption
		if st != nil && len(st.Reservations) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a still holds %+v after b refused", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
