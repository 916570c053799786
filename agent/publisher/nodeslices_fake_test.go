package publisher

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// TestStaleSlicesOfNode: a slice of the node for a port the Service no
// longer has is deleted; a refused deletion keeps it and fails the pass
// (counted), a slice already gone is no error, and another node's slice is
// never touched.
func TestStaleSlicesOfNode(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantErr     func(error) bool
		wantOutcome string
		wantKept    bool
	}{
		{name: "deleted", wantOutcome: "ok"},
		// Only the answer is injected: the fake still holds the slice.
		{name: "already gone", err: apierrors.NewNotFound(slicesGR, "web-metrics-node-a"), wantOutcome: "ok", wantKept: true},
		{name: "forbidden: kept", err: apierrors.NewForbidden(slicesGR, "web-metrics-node-a", errors.New("denied")),
			wantErr: apierrors.IsForbidden, wantOutcome: "forbidden", wantKept: true},
		{name: "changed since read: kept, planned again", err: apierrors.NewConflict(slicesGR, "web-metrics-node-a", errors.New("precondition failed")),
			wantErr: apierrors.IsConflict, wantOutcome: "conflict", wantKept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Another node's slice of the port that goes, as its agent
			// published it.
			other := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-metrics-node-b", Labels: map[string]string{
					discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
					endpoints.DefaultNodeLabel: endpoints.NodeLabelValue("node-b")}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: new("metrics"), Port: new(int32(8081))}},
			}
			w := newFakeWorld(t, webResource(false, nil), webService("http", "metrics"), testNodeObject(), webPod(true), other)
			if err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			stale := sliceName(t, "metrics")
			if w.slice(t, stale) == nil {
				t.Fatalf("no slice %s published for the port metrics", stale)
			}

			w.setServicePorts(t, "http")
			w.faults.set("delete", tt.err, false)
			err := w.reconcile(t)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("reconcile: %v", err)
			case tt.wantErr != nil && (err == nil || !tt.wantErr(err)):
				t.Fatalf("reconcile error %v, want the delete's", err)
			}
			if n := w.writes("delete", tt.wantOutcome); n != 1 {
				t.Errorf("delete counted %v times as %s, want once", n, tt.wantOutcome)
			}
			if kept := w.slice(t, stale) != nil; kept != tt.wantKept {
				t.Errorf("slice %s kept: %v, want %v", stale, kept, tt.wantKept)
			}
			if got := w.readiness(t, sliceName(t, "http")); got != "ready" {
				t.Errorf("web-1 is %s on http, want ready", got)
			}
			if w.slice(t, other.Name) == nil {
				t.Errorf("slice %s of node-b deleted", other.Name)
			}
		})
	}
}

// TestStartsFromPublished: a probe target that starts takes its verdict
// from what is published, so that neither an agent restart nor adopting a
// Service withdraws traffic: from the agent's own slices, or, for a
// resource that adopts a Service, from the built-in controller's slices
// (only with the annotation). The pod is not Ready throughout: the probe,
// not the pod's readiness, decides.
func TestStartsFromPublished(t *testing.T) {
	adopt := map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	builtin := func(serving bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-x7k2p", Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: swhv1alpha1.BuiltinEndpointSliceManager}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"},
				Conditions: discoveryv1.EndpointConditions{Ready: new(serving), Serving: new(serving)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: "uid-web-1"}}},
		}
	}
	own := func(t *testing.T, serving bool) *discoveryv1.EndpointSlice {
		s := builtin(serving)
		s.Name = sliceName(t, "http")
		s.Labels = map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
			endpoints.DefaultNodeLabel: endpoints.NodeLabelValue(testNode)}
		for i := range s.Endpoints {
			node := testNode
			s.Endpoints[i].NodeName = &node
		}
		return s
	}
	tests := []struct {
		name        string
		annotations map[string]string
		slice       func(t *testing.T) *discoveryv1.EndpointSlice
		want        string
	}{
		{"nothing published: starts failed", nil, nil, "not ready"},
		{"adopting, built-in serving: starts passed", adopt, func(*testing.T) *discoveryv1.EndpointSlice { return builtin(true) }, "ready"},
		{"adopting, built-in not serving: starts failed", adopt, func(*testing.T) *discoveryv1.EndpointSlice { return builtin(false) }, "not ready"},
		{"not adopting: built-in slices ignored", nil, func(*testing.T) *discoveryv1.EndpointSlice { return builtin(true) }, "not ready"},
		{"restart, own slice serving: starts passed", nil, func(t *testing.T) *discoveryv1.EndpointSlice { return own(t, true) }, "ready"},
		{"restart, own slice not serving: starts failed", nil, func(t *testing.T) *discoveryv1.EndpointSlice { return own(t, false) }, "not ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []client.Object{webResource(true, tt.annotations), webService("http"), testNodeObject(), webPod(false)}
			if tt.slice != nil {
				objs = append(objs, tt.slice(t))
			}
			w := newFakeWorld(t, objs...)
			if err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			if n := w.p.targets.len(); n != 1 {
				t.Fatalf("%d probe targets, want 1", n)
			}
			if got := w.readiness(t, sliceName(t, "http")); got != tt.want {
				t.Errorf("web-1 is %s, want %s", got, tt.want)
			}
			if tt.slice != nil && tt.annotations != nil && w.slice(t, "web-x7k2p") == nil {
				t.Error("the built-in slice was deleted: that is the controller's job, once the agents publish")
			}
		})
	}
}

// TestServiceNotTheResources: a Service of the resource's name that the
// resource does not control gets no slices, and the targets stop.
func TestServiceNotTheResources(t *testing.T) {
	w := newFakeWorld(t, webResource(true, nil), webService("http"), testNodeObject(), webPod(true))
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if w.p.targets.len() != 1 || w.slice(t, sliceName(t, "http")) == nil {
		t.Fatalf("%d targets, slice %s: want the resource published first", w.p.targets.len(), describe(w.slice(t, sliceName(t, "http"))))
	}
	svc := &corev1.Service{}
	if err := w.c.Get(t.Context(), testKey, svc); err != nil {
		t.Fatal(err)
	}
	svc.OwnerReferences = nil
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "admin", Port: 9000, TargetPort: intstr.FromInt32(9000)})
	if err := w.c.Update(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if n := w.p.targets.len(); n != 0 {
		t.Errorf("%d targets left, want none", n)
	}
	if w.slice(t, sliceName(t, "admin")) != nil || w.writes("create", "ok") != 1 || w.writes("delete", "ok") != 0 {
		t.Errorf("wrote slices for a Service that is not the resource's: creates %v, deletes %v", w.writes("create", "ok"), w.writes("delete", "ok"))
	}
}

// TestNothingKeptOnEitherWayOut: whether the resource is gone or its
// Service is not its own, the publisher keeps nothing about it: no target,
// no taken slice name.
func TestNothingKeptOnEitherWayOut(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, w *fakeWorld)
	}{
		{"resource deleted", func(t *testing.T, w *fakeWorld) {
			if err := w.c.Delete(t.Context(), webResource(true, nil)); err != nil {
				t.Fatal(err)
			}
		}},
		{"Service not the resource's", func(t *testing.T, w *fakeWorld) {
			svc := &corev1.Service{}
			if err := w.c.Get(t.Context(), testKey, svc); err != nil {
				t.Fatal(err)
			}
			svc.OwnerReferences = nil
			if err := w.c.Update(t.Context(), svc); err != nil {
				t.Fatal(err)
			}
		}},
		{"Service deleted", func(t *testing.T, w *fakeWorld) {
			if err := w.c.Delete(t.Context(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: testKey.Namespace, Name: testKey.Name}}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorld(t, webResource(true, nil), webService("http"), testNodeObject(), webPod(true))
			if err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			w.p.takenSliceNames.add(testKey, "web-http-taken")
			if w.p.targets.len() != 1 {
				t.Fatalf("%d targets: want the resource published first", w.p.targets.len())
			}
			tt.change(t, w)
			if err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			if n := w.p.targets.len(); n != 0 {
				t.Errorf("%d targets left", n)
			}
			if names := w.p.takenSliceNames.names(testKey); len(names) != 0 {
				t.Errorf("taken names kept: %v", names)
			}
		})
	}
}
