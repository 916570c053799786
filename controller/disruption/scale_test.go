package disruption

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// TestOtherControllersScale: the pods of a controller that is neither a
// ReplicaSet, a Deployment nor a StatefulSet (a CloudNativePG-style
// Cluster of 3) are expected as the controller's /scale says, as kube's
// disruption controller counts them, not as many as exist: once the first
// evicted instance is gone, a second eviction would take two of three.
// When the scale cannot be read, the budget allows nothing.
func TestOtherControllersScale(t *testing.T) {
	scale := func(replicas int64, err error) interceptor.Funcs {
		return interceptor.Funcs{SubResourceGet: func(ctx context.Context, c client.Client, sub string, obj, out client.Object, opts ...client.SubResourceGetOption) error {
			if sub != "scale" || obj.GetObjectKind().GroupVersionKind().Kind != "Cluster" || obj.GetName() != "pg" {
				return c.SubResource(sub).Get(ctx, obj, out, opts...)
			}
			if err != nil {
				return err
			}
			u := out.(*unstructured.Unstructured)
			u.SetAPIVersion("autoscaling/v1")
			u.SetKind("Scale")
			u.SetName("pg")
			u.SetUID("uid-cluster-pg")
			return unstructured.SetNestedField(u.Object, replicas, "spec", "replicas")
		}}
	}
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "postgresql.cnpg.io", Resource: "clusters"}, "pg")
	tests := []struct {
		name    string
		budget  swhv1alpha1.DisruptionBudget
		funcs   interceptor.Funcs
		allowed bool
		message string
	}{
		{name: "maxUnavailable 1, scale 3, one gone", budget: swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			funcs: scale(3, nil), message: "needs 2 of 3 pods"},
		{name: "maxUnavailable 1, scale 2 (scaled in)", budget: swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			funcs: scale(2, nil), allowed: true},
		{name: "minAvailable 66%, scale 3", budget: swhv1alpha1.DisruptionBudget{MinAvailable: ptr.To(intstr.FromString("66%"))},
			funcs: scale(3, nil), message: "needs 2 of 3 pods"},
		{name: "maxUnavailable 1, no scale", budget: swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			funcs: scale(0, notFound), message: "Cluster pg"},
		{name: "minAvailable 1 needs no scale", budget: swhv1alpha1.DisruptionBudget{MinAvailable: ptr.To(intstr.FromInt32(1))},
			funcs: scale(0, notFound), allowed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			budget := tt.budget
			budget.Ports = []string{"client"}
			swh := resource(budget)
			// pg-0 was evicted and is gone; pg-1 and pg-2 pass.
			objs := append(brokerObjects(map[string]bool{"b-1": true, "b-2": true}), swh)
			for _, o := range objs {
				if p, ok := o.(*corev1.Pod); ok {
					p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "postgresql.cnpg.io/v1", Kind: "Cluster", Name: "pg", UID: "uid-cluster-pg", Controller: ptr.To(true)}}
				}
			}
			g := fakeGuard(t, tt.funcs, objs...)
			g.Now = func() time.Time { return now }
			resp := g.Handle(context.Background(), evictionRequest("b-1", `{"kind":"Eviction"}`))
			if resp.Allowed != tt.allowed {
				t.Fatalf("eviction of b-1: allowed = %v, want %v (%+v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && (resp.Result.Code != http.StatusTooManyRequests || !strings.Contains(resp.Result.Message, tt.message)) {
				t.Errorf("answer %d %q, want 429 saying %q", resp.Result.Code, resp.Result.Message, tt.message)
			}
		})
	}
}

// TestWorkloadScales: the built-in workloads are counted through their
// /scale too, a ReplicaSet through its Deployment.
func TestWorkloadScales(t *testing.T) {
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kafka", Name: "web", UID: "uid-web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](5)}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kafka", Name: "web-1", UID: "uid-web-1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "uid-web", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](4)}}
	orphanRS := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kafka", Name: "solo", UID: "uid-solo"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2)}}
	ss := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kafka", Name: "db", UID: "uid-db"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)}}
	owned := func(name, kind, owner, uid string) corev1.Pod {
		p := broker(name, "n0")
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: owner, UID: types.UID(uid), Controller: ptr.To(true)}}
		return p
	}
	tests := []struct {
		name string
		pods []corev1.Pod
		want int32
	}{
		{"a Deployment's pods", []corev1.Pod{owned("a", "ReplicaSet", "web-1", "uid-web-1"), owned("b", "ReplicaSet", "web-1", "uid-web-1")}, 5},
		{"a ReplicaSet of its own", []corev1.Pod{owned("a", "ReplicaSet", "solo", "uid-solo")}, 2},
		{"a StatefulSet's pods", []corev1.Pod{owned("a", "StatefulSet", "db", "uid-db")}, 3},
		{"all of them and a pod of no controller", []corev1.Pod{owned("a", "ReplicaSet", "web-1", "uid-web-1"), owned("b", "ReplicaSet", "solo", "uid-solo"),
			owned("c", "StatefulSet", "db", "uid-db"), broker("d", "n0")}, 11},
		// kube counts bare pods as none (and warns), which lets a
		// maxUnavailable budget lose all of them at once.
		{"bare pods count as themselves", []corev1.Pod{broker("a", "n0"), broker("b", "n0"), broker("c", "n0")}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := fakeGuard(t, interceptor.Funcs{}, deploy, rs, orphanRS, ss)
			got, problem, err := expectedPods(context.Background(), &g.Sources, &swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, tt.pods)
			if err != nil || problem != "" || got != tt.want {
				t.Errorf("expectedPods = %d, %q, %v; want %d", got, problem, err, tt.want)
			}
		})
	}
}
