package reconciler

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/swh-dev/swh/endpoints"
)

// TestStaleNodeCache: the cache misses a node the API server has (it was
// created while the cache's node watch was down, after an API server
// restart); its slices are not deleted. A node the API server does not have
// either still loses its slices.
func TestStaleNodeCache(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
	}}
	slice := func(name, node string) *discoveryv1.EndpointSlice {
		port := "http"
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: node}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &port}},
		}
	}
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	objs := []client.Object{slice("web-http-a", "a"), slice("web-http-new", "new"), slice("web-http-gone", "gone")}
	// The cache knows node a only; the API server knows a and new.
	cache := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, node("a"))...).Build()
	api := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(node("a"), node("new")).Build()
	c := &StaleSlices{Client: cache, APIReader: api}
	ctx := context.Background()
	var list discoveryv1.EndpointSliceList
	if err := cache.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if err := c.collect(ctx, svc, list.Items, true); err != nil {
		t.Fatal(err)
	}
	if err := cache.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "web-http-a"}, &discoveryv1.EndpointSlice{}); err != nil {
		t.Errorf("the slice of node a, which both have, was deleted: %v", err)
	}
	if err := cache.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "web-http-new"}, &discoveryv1.EndpointSlice{}); err != nil {
		t.Errorf("the slice of node new, which the API server has, was deleted: %v", err)
	}
	if err := cache.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "web-http-gone"}, &discoveryv1.EndpointSlice{}); err == nil {
		t.Error("the slice of node gone, which nobody has, was kept")
	}
}

// TestStaleSliceOfANewerService: the cached Service lacks a port the API
// server's already has (an apply the cache has not seen): the agent that
// publishes the new port keeps its slice. A port neither has goes.
func TestStaleSliceOfANewerService(t *testing.T) {
	service := func(ports ...string) *corev1.Service {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-svc"},
			Spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
		for i, p := range ports {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p, Port: int32(80 + i)})
		}
		return svc
	}
	slice := func(name, port string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: "a"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &port}},
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	cached := service("http")
	cache := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(slice("web-http-a", "http"), slice("web-admin-a", "admin"), slice("web-old-a", "old"), node).Build()
	api := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(service("http", "admin"), node).Build()
	c := &StaleSlices{Client: cache, APIReader: api}
	ctx := context.Background()
	var list discoveryv1.EndpointSliceList
	if err := cache.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if err := c.collect(ctx, cached, list.Items, true); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"web-http-a": true, "web-admin-a": true, "web-old-a": false} {
		err := cache.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, &discoveryv1.EndpointSlice{})
		if got := err == nil; got != want {
			t.Errorf("slice %s kept: %v, want %v (%v)", name, got, want, err)
		}
	}
}
