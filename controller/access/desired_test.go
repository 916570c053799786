package access

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

func resource(name string, secrets ...string) swhv1alpha1.ServiceWithHealthchecks {
	swh := swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	hc := &swhv1alpha1.Healthcheck{Probes: []swhv1alpha1.Probe{{Mode: swhv1alpha1.ProbeModeTCP, TCP: &swhv1alpha1.TCPProbe{}}}}
	for _, s := range secrets {
		hc.Probes = append(hc.Probes, swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModePostgreSQL,
			PostgreSQL: &swhv1alpha1.PostgreSQLProbe{AuthSecretName: s}})
	}
	swh.Spec.Healthcheck = hc
	return swh
}

func TestSecretNames(t *testing.T) {
	deleting := resource("gone", "old")
	deleting.DeletionTimestamp = new(metav1.Now())
	noHC := resource("plain")
	noHC.Spec.Healthcheck = nil
	for _, tc := range []struct {
		name      string
		in        []swhv1alpha1.ServiceWithHealthchecks
		want      []string
		wantUsers []string
	}{
		{name: "none", in: []swhv1alpha1.ServiceWithHealthchecks{resource("a"), noHC}},
		{name: "one", in: []swhv1alpha1.ServiceWithHealthchecks{resource("a", "db")}, want: []string{"db"}, wantUsers: []string{"a"}},
		{name: "sorted and distinct", in: []swhv1alpha1.ServiceWithHealthchecks{resource("b", "z", "db"), resource("a", "db", ""), resource("c")},
			want: []string{"db", "z"}, wantUsers: []string{"a", "b"}},
		{name: "a resource being deleted counts no more", in: []swhv1alpha1.ServiceWithHealthchecks{deleting, resource("a", "db")},
			want: []string{"db"}, wantUsers: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, users := secretNames(serving(tc.in))
			var userNames []string
			for _, u := range users {
				userNames = append(userNames, u.Name)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(userNames, tc.wantUsers) {
				t.Errorf("got %v used by %v, want %v used by %v", got, userNames, tc.want, tc.wantUsers)
			}
		})
	}
}

func TestControls(t *testing.T) {
	swh := resource("a")
	ref := func(apiVersion, kind string, uid types.UID, controller bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "a", UID: uid, Controller: &controller}}
	}
	gv := swhv1alpha1.GroupVersion.String()
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
		want bool
	}{
		{name: "child", refs: ref(gv, kind, swh.UID, true), want: true},
		{name: "another version of the group", refs: ref("network.swh.dev/v1", kind, swh.UID, true), want: true},
		{name: "no owner (not adopted yet)"},
		{name: "owned, not controlled", refs: ref(gv, kind, swh.UID, false)},
		{name: "a former resource of the same name", refs: ref(gv, kind, "uid-old", true)},
		{name: "another kind", refs: ref("apps/v1", "Deployment", swh.UID, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", OwnerReferences: tc.refs}}
			if got := controls(&swh, svc); got != tc.want {
				t.Errorf("controls = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    types.NamespacedName
		wantErr bool
	}{
		{in: "swh-system/swh-agent", want: types.NamespacedName{Namespace: "swh-system", Name: "swh-agent"}},
		{in: "swh-agent", wantErr: true},
		{in: "/swh-agent", wantErr: true},
		{in: "swh-system/", wantErr: true},
		{in: "swh-system/Agent", wantErr: true},
	} {
		got, err := ParseServiceAccount(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseServiceAccount(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestSync: what someone else changed is put back, and what an update
// cannot change makes the object be replaced.
func TestSync(t *testing.T) {
	owners := []*swhv1alpha1.ServiceWithHealthchecks{new(resource("a"))}
	wantCM := desiredConfigMap("ns", owners, map[string]string{"a": "uid-a"})
	immutable := true
	for _, tc := range []struct {
		name                  string
		edit                  func(*corev1.ConfigMap)
		wantChange, wantRenew bool
	}{
		{name: "as wanted, other labels and annotations kept", edit: func(cm *corev1.ConfigMap) {
			cm.Labels["team"] = "x"
			cm.Annotations = map[string]string{"note": "x"}
		}},
		{name: "key added", edit: func(cm *corev1.ConfigMap) { cm.Data["kube-dns"] = "x" }, wantChange: true},
		{name: "value changed", edit: func(cm *corev1.ConfigMap) { cm.Data["a"] = "x" }, wantChange: true},
		{name: "binary data", edit: func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"kube-dns": nil} }, wantChange: true},
		{name: "label removed", edit: func(cm *corev1.ConfigMap) { delete(cm.Labels, LabelManagedBy) }, wantChange: true},
		{name: "owner removed", edit: func(cm *corev1.ConfigMap) { cm.OwnerReferences = nil }, wantChange: true},
		{name: "finalizer", edit: func(cm *corev1.ConfigMap) { cm.Finalizers = []string{"tenant/keep"} }, wantChange: true},
		{name: "immutable", edit: func(cm *corev1.ConfigMap) { cm.Immutable = &immutable }, wantChange: true, wantRenew: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := wantCM.DeepCopy()
			tc.edit(have)
			changed, replace := configMapOps.sync(have, wantCM)
			if changed != tc.wantChange || replace != tc.wantRenew {
				t.Fatalf("changed %v replace %v, want %v %v", changed, replace, tc.wantChange, tc.wantRenew)
			}
			if again, _ := configMapOps.sync(have, wantCM); !replace && again {
				t.Errorf("still differs after sync: %+v", have)
			}
		})
	}

	agent := types.NamespacedName{Namespace: "swh-system", Name: "swh-agent"}
	wantRB := desiredRoleBinding("ns", agent, owners)
	have := wantRB.DeepCopy()
	have.Subjects = append(have.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "mallory"})
	if changed, replace := roleBindingOps.sync(have, wantRB); !changed || replace || len(have.Subjects) != 1 {
		t.Errorf("an added subject: changed %v replace %v, subjects %v", changed, replace, have.Subjects)
	}
	have = wantRB.DeepCopy()
	have.RoleRef.Kind, have.RoleRef.Name = "ClusterRole", "admin"
	if _, replace := roleBindingOps.sync(have, wantRB); !replace {
		t.Error("another role: not replaced")
	}
}
