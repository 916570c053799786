package access

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// childService is the Service a resource controls.
func childService(swh *swhv1alpha1.ServiceWithHealthchecks) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: swh.Namespace, Name: swh.Name, UID: "uid-service-" + swh.UID,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(swh, swhv1alpha1.GroupVersion.WithKind(kind))}}}
}

// TestWritesArePaced: after a write, a namespace's next write waits
// GapPerService per resource, and everything that changed meanwhile goes
// in that one write; a reconcile that writes nothing delays nothing.
func TestWritesArePaced(t *testing.T) {
	ctx := context.Background()
	web := resource("web")
	r := fakeReconciler(t, &web, childService(&web))
	r.GapPerService = time.Second
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns"}}
	registered := func() []string {
		t.Helper()
		cm := &corev1.ConfigMap{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: "ns", Name: ServicesConfigMap}, cm); err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(cm.Data))
	}
	reconcile := func(wantWait time.Duration, want ...string) {
		t.Helper()
		res, err := r.Reconcile(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter != wantWait {
			t.Errorf("at %v: requeue after %v, want %v", now.Sub(time.Unix(1000, 0)), res.RequeueAfter, wantWait)
		}
		if got := registered(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("at %v: registered %v, want %v", now.Sub(time.Unix(1000, 0)), got, want)
		}
	}

	reconcile(0, "web") // the first write goes at once; a gap of 1 s follows
	for _, name := range []string{"api", "db"} {
		swh := resource(name)
		if err := r.Client.Create(ctx, &swh); err != nil {
			t.Fatal(err)
		}
		if err := r.Client.Create(ctx, childService(&swh)); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(300 * time.Millisecond)
	reconcile(700*time.Millisecond, "web") // too soon: nothing read, nothing written
	now = now.Add(700 * time.Millisecond)
	reconcile(0, "api", "db", "web") // both in one write; 3 resources: a gap of 3 s
	now = now.Add(time.Second)
	reconcile(2*time.Second, "api", "db", "web")
	now = now.Add(2 * time.Second)
	reconcile(0, "api", "db", "web") // nothing to write, so no gap after it
	reconcile(0, "api", "db", "web")
}

func TestRegistryLog(t *testing.T) {
	big := registry{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		big[name] = "uid-" + name
	}
	small := maps.Clone(big)
	delete(small, "a")
	small["z"] = "uid-z"
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"a few", registry{"b": "1", "a": "2"}.String(), "2 Services: a, b"},
		{"many", big.String(), "12 Services: a, b, c, d, e, f, g, h, i, j, …"},
		{"change", describeChange(big, small).(string), "12 Services; registered z; unregistered a"},
		{"new UID", describeChange(registry{"a": "1"}, registry{"a": "2"}).(string), "1 Services; registered a; unregistered a"},
		{"not a registry", describeChange(nil, "rules").(string), "rules"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// TestFailedWriteIsNotPaced: a write that failed leaves no gap, so its
// retry keeps controller-runtime's backoff instead of waiting the gap
// (whose RequeueAfter would reset that backoff).
func TestFailedWriteIsNotPaced(t *testing.T) {
	ctx := context.Background()
	web := resource("web")
	failures := 1
	r := fakeReconciler(t, &web, childService(&web))
	r.Client = interceptor.NewClient(r.Client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok && failures > 0 {
				failures--
				return errors.New("refused")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	r.GapPerService = time.Hour
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns"}}
	if _, err := r.Reconcile(ctx, req); err == nil {
		t.Fatal("the refused create returned no error")
	}
	res, err := r.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("the retry: %+v, %v; want it to write at once", res, err)
	}
	res, err = r.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter != time.Hour {
		t.Errorf("after the write: %+v, %v; want a wait of an hour", res, err)
	}
}
