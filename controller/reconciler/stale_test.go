package reconciler

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// TestStaleSlicesReconcile: which of a resource's agent slices the
// collector deletes, from what the resource, its Service and the nodes say,
// and what a forbidden deletion leaves.
func TestStaleSlicesReconcile(t *testing.T) {
	agentSlice := func(name, node, port string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: node}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &port}},
		}
	}
	// The owned Service has port http (81); slices: one live, one of a gone
	// node, one of a port the Service no longer has.
	service := func() *corev1.Service {
		svc := ownedService()
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		return svc
	}
	withSynced := func(reason string) *swhv1alpha1.ServiceWithHealthchecks {
		swh := webResource(nil)
		swh.Status.Conditions = []metav1.Condition{{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionFalse,
			Reason: reason, LastTransitionTime: metav1.Now()}}
		return swh
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	slicesOf := func() []client.Object {
		return []client.Object{agentSlice("web-http-a", "a", "http"), agentSlice("web-http-gone", "gone", "http"), agentSlice("web-admin-a", "a", "admin")}
	}
	forbidDelete := interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		return forbiddenErr(schema.GroupResource{Group: discoveryv1.GroupName, Resource: "endpointslices"})
	}}
	tests := []struct {
		name      string
		objs      []client.Object
		funcs     interceptor.Funcs
		wantLeft  []string
		wantEvent string // a prefix of an event; "" for none
		wantAfter bool   // retried after forbiddenRetry
	}{
		{name: "synced: gone node and gone port deleted",
			objs:     append(slicesOf(), webResource(nil), service(), node),
			wantLeft: []string{"web-http-a"}},
		{name: "spec refused: only the gone node's slice",
			objs:     append(slicesOf(), withSynced(swhv1alpha1.ReasonServiceRejected), service(), node),
			wantLeft: []string{"web-admin-a", "web-http-a"}},
		{name: "a write forbidden: only the gone node's slice",
			objs:     append(slicesOf(), withSynced(swhv1alpha1.ReasonForbidden), service(), node),
			wantLeft: []string{"web-admin-a", "web-http-a"}},
		{name: "Service not the resource's: nothing judged",
			objs:     append(slicesOf(), webResource(nil), plainService(""), node),
			wantLeft: []string{"web-admin-a", "web-http-a", "web-http-gone"}},
		{name: "no Service yet: nothing judged",
			objs:     append(slicesOf(), webResource(nil), node),
			wantLeft: []string{"web-admin-a", "web-http-a", "web-http-gone"}},
		{name: "resource gone: left to the garbage collector",
			objs:     append(slicesOf(), service(), node),
			wantLeft: []string{"web-admin-a", "web-http-a", "web-http-gone"}},
		{name: "deletion forbidden: an event, retried later",
			objs: append(slicesOf(), webResource(nil), service(), node), funcs: forbidDelete,
			wantLeft:  []string{"web-admin-a", "web-http-a", "web-http-gone"},
			wantEvent: "Warning Forbidden the API server forbade deleting a slice", wantAfter: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(tt.objs...).WithInterceptorFuncs(tt.funcs).Build()
			rec := events.NewFakeRecorder(10)
			collector := &StaleSlices{Client: c, APIReader: c, Recorder: rec}
			ctx := context.Background()
			res, err := collector.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.RequeueAfter == forbiddenRetry; got != tt.wantAfter {
				t.Errorf("RequeueAfter %v, want a retry after %v: %v", res.RequeueAfter, forbiddenRetry, tt.wantAfter)
			}
			list := &discoveryv1.EndpointSliceList{}
			if err := c.List(ctx, list); err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, s := range list.Items {
				left = append(left, s.Name)
			}
			slices.Sort(left)
			if !slices.Equal(left, tt.wantLeft) {
				t.Errorf("slices left %v, want %v", left, tt.wantLeft)
			}
			var evs []string
			for len(rec.Events) > 0 {
				evs = append(evs, <-rec.Events)
			}
			switch {
			case tt.wantEvent == "" && len(evs) > 0:
				t.Errorf("events %q, want none", evs)
			case tt.wantEvent != "" && (len(evs) != 1 || !strings.HasPrefix(evs[0], tt.wantEvent)):
				t.Errorf("events %q, want one starting %q", evs, tt.wantEvent)
			}
		})
	}
}
