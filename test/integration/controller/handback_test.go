package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/access"
	"github.com/swh-dev/swh/controller/handback"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// TestHandBackRunsAgain: a hand-back whose Service kube-controller-manager
// does not publish in time fails, makes the Service plain and keeps the
// agents' slices (removing them would leave the Service with no endpoint);
// run again once the built-in controller runs, it finishes: the agents'
// slices go once its own list the pods. Real API server, real
// kube-controller-manager (its EndpointSlice controller).
func TestHandBackRunsAgain(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	const node = "handback-node"
	created, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), created) })
	swh := newResource(ns, "web")
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	var entries []discoveryv1.Endpoint
	for i, name := range []string{"web-a", "web-b"} {
		ip := []string{"10.244.77.1", "10.244.77.2"}[i]
		pod, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{Namespace: ns, Name: name, Node: node,
			Labels: map[string]string{"app": "web"}, IPs: []string{ip}, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, endpoint(name, string(pod.UID), ip, node, true))
	}
	// The child Service and the agents' slice, as swh left them.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{swhv1alpha1.LabelService: "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: swhv1alpha1.GroupVersion.String(), Kind: "ServiceWithHealthchecks",
				Name: "web", UID: swh.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := controlPlane.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := controlPlane.Client.Create(ctx, agentSlice(ns, "web", "http", node, discoveryv1.AddressTypeIPv4, entries...)); err != nil {
		t.Fatal(err)
	}
	registry := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: access.ServicesConfigMap,
		Labels: map[string]string{access.LabelManagedBy: access.ManagedBy}}}
	if err := controlPlane.Client.Create(ctx, registry); err != nil {
		t.Fatal(err)
	}

	// No kube-controller-manager yet: nothing publishes the pods.
	err = handback.Run(ctx, controlPlane.Client, handback.Options{Timeout: 2 * time.Second, Poll: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), ns+"/web") || !strings.Contains(err.Error(), "kept") {
		t.Fatalf("the first run returned %v, want it to name %s/web and keep its agents' slices", err, ns)
	}
	got, err := getService(ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Selector["app"] != "web" || len(got.OwnerReferences) != 0 || got.Labels[swhv1alpha1.LabelService] != "" {
		t.Errorf("after the first run: selector %v, owners %v, labels %v; want a plain Service selecting the pods", got.Spec.Selector, got.OwnerReferences, got.Labels)
	}
	if n := agentSlices(t, ctx, ns, endpoints.DefaultManagedBy); n != 1 {
		t.Fatalf("after the first run: %d slices of the agents, want the one kept", n)
	}
	if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(registry), &corev1.ConfigMap{}); err == nil {
		t.Error("the agents' registry survived the first run")
	}

	// The built-in controller runs; the hand-back runs again and finishes.
	kcm, err := harness.StartControllerManager(controlPlane, harness.ControllerManagerOptions{Controllers: []string{"endpointslice"}})
	if err != nil {
		t.Fatal(err)
	}
	defer kcm.Stop()
	if err := handback.Run(ctx, controlPlane.Client, handback.Options{Timeout: time.Minute, Poll: 100 * time.Millisecond}); err != nil {
		t.Fatalf("the second run: %v", err)
	}
	if n := agentSlices(t, ctx, ns, endpoints.DefaultManagedBy); n != 0 {
		t.Errorf("after the second run: %d slices of the agents, want none", n)
	}
	var builtin discoveryv1.EndpointSliceList
	if err := controlPlane.Client.List(ctx, &builtin, client.InNamespace(ns), client.MatchingLabels{
		discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}); err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, s := range builtin.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && (e.Conditions.Ready == nil || *e.Conditions.Ready) {
				ready[e.TargetRef.Name] = true
			}
		}
	}
	if !ready["web-a"] || !ready["web-b"] {
		t.Errorf("kube-controller-manager's slices publish %v ready, want web-a and web-b", ready)
	}
}

func agentSlices(t *testing.T, ctx context.Context, ns, managedBy string) int {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	if err := controlPlane.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{
		discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: managedBy}); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}
