package nodehealth

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/swh-dev/swh/endpoints"
)

// TestStaleNodeCache: the cache still has a node not Ready that the API
// server has Ready again (its watch reconnecting after an API server
// restart), and its agent has published its endpoints again: they stay.
// When the API server agrees that the node is not Ready, they are
// withdrawn.
func TestStaleNodeCache(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	nodeWith := func(s corev1.ConditionStatus) *corev1.Node {
		n := node(cond(corev1.NodeReady, s, at))
		n.Name = "n1"
		return n
	}
	ready, port := true, "http"
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-http-n1", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
			endpoints.DefaultNodeLabel: endpoints.NodeLabelValue("n1")}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: new("n1"),
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready}}},
	}
	tests := []struct {
		name     string
		api      corev1.ConditionStatus
		wantKept bool
	}{
		{"the API server has it Ready again", corev1.ConditionTrue, true},
		{"the API server agrees", corev1.ConditionUnknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nodeWith(corev1.ConditionUnknown), slice.DeepCopy()).Build()
			api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(nodeWith(tt.api)).Build()
			w := &Withdrawer{Client: cache, APIReader: api}
			w.init()
			ctx := context.Background()
			if _, err := w.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
				t.Fatal(err)
			}
			got := &discoveryv1.EndpointSlice{}
			if err := cache.Get(ctx, client.ObjectKeyFromObject(slice), got); err != nil {
				t.Fatal(err)
			}
			kept := *got.Endpoints[0].Conditions.Ready
			if kept != tt.wantKept {
				t.Errorf("endpoint ready = %v, want %v", kept, tt.wantKept)
			}
		})
	}
}
