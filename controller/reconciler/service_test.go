package reconciler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPreviousIncarnation: only a controller reference to a
// ServiceWithHealthchecks of the same name and another UID is a deleted
// resource's; anything else is someone else's Service (or this one's).
func TestPreviousIncarnation(t *testing.T) {
	yes, no := true, false
	ref := func(apiVersion, kind, name string, uid types.UID, controller *bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: controller}
	}
	const swhAPI = "network.swh.dev/v1alpha1"
	tests := []struct {
		name string
		refs []metav1.OwnerReference
		want bool
	}{
		{name: "no owner", want: false},
		{name: "this resource", refs: []metav1.OwnerReference{ref(swhAPI, "ServiceWithHealthchecks", "web", "uid-web", &yes)}, want: false},
		{name: "a deleted resource of the same name", refs: []metav1.OwnerReference{ref(swhAPI, "ServiceWithHealthchecks", "web", "uid-old", &yes)}, want: true},
		{name: "another version of the API", refs: []metav1.OwnerReference{ref("network.swh.dev/v1", "ServiceWithHealthchecks", "web", "uid-old", &yes)}, want: true},
		{name: "not the controller", refs: []metav1.OwnerReference{ref(swhAPI, "ServiceWithHealthchecks", "web", "uid-old", &no)}, want: false},
		{name: "another name", refs: []metav1.OwnerReference{ref(swhAPI, "ServiceWithHealthchecks", "shop", "uid-old", &yes)}, want: false},
		{name: "another group's kind of that name", refs: []metav1.OwnerReference{ref("example.com/v1", "ServiceWithHealthchecks", "web", "uid-old", &yes)}, want: false},
		{name: "a Deployment", refs: []metav1.OwnerReference{ref("apps/v1", "Deployment", "web", "uid-old", &yes)}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", OwnerReferences: tt.refs}}
			if got := previousIncarnation(svc, webResource(nil)) != nil; got != tt.want {
				t.Errorf("previousIncarnation = %v, want %v", got, tt.want)
			}
		})
	}
}
