package access

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

func fakeReconciler(t *testing.T, objs ...client.Object) *Reconciler {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := swhv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return &Reconciler{Client: c, APIReader: c}
}

// TestRegisteredServiceUID: the registry holds the child Service's UID,
// which the admission policy compares with the slice's owner reference,
// not the resource's.
func TestRegisteredServiceUID(t *testing.T) {
	ctx := context.Background()
	swh := resource("web")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-service-web",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&swh, swhv1alpha1.GroupVersion.WithKind(kind))}}}
	r := fakeReconciler(t, &swh, svc)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: "ns", Name: ServicesConfigMap}, cm); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"web": "uid-service-web"}; !maps.Equal(cm.Data, want) {
		t.Errorf("registered %v, want %v", cm.Data, want)
	}
}

// TestRemoveClearsFinalizers: what no resource needs goes even when someone
// added a finalizer, instead of staying Terminating and in force.
func TestRemoveClearsFinalizers(t *testing.T) {
	ctx := context.Background()
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy},
			Finalizers: []string{"tenant.example/keep"}}
	}
	cm := &corev1.ConfigMap{ObjectMeta: meta(ServicesConfigMap)}
	role := &rbacv1.Role{ObjectMeta: meta(SecretsGrant)}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta(SecretsGrant),
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: SecretsGrant}}
	r := fakeReconciler(t, cm, role, binding)
	r.AgentServiceAccount.Name = "swh-agent"
	// No resource in ns: nothing is needed there.
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{cm, role, binding} {
		err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s: %v, finalizers %v, deletion %v; want it gone", obj, obj.GetName(), err, obj.GetFinalizers(), obj.GetDeletionTimestamp())
		}
	}
}
