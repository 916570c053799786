package disruption

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestDecodePodPage: a page of a PodList as the API server sends it,
// decoded as it streams, gives the pods trimmed to what a count reads and
// the continue token.
func TestDecodePodPage(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	p0 := broker("b-0", "n0")
	p0.Labels = map[string]string{"app": "kafka"}
	p0.Spec.Containers = []corev1.Container{{Name: "c", Image: "i", Env: []corev1.EnvVar{{Name: "BIG", Value: big}}}}
	p0.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u-x"},
		{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "kafka", UID: "u-ss", Controller: ptr.To(true)},
	}
	p1 := broker("b-1", "")
	p1.Status.Phase = corev1.PodPending
	p1.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	p1.Annotations = map[string]string{"a": big}
	tests := []struct {
		name string
		list corev1.PodList
		next string
	}{
		{name: "two pods and a continue token", list: corev1.PodList{ListMeta: metav1.ListMeta{Continue: "abc", ResourceVersion: "12"}, Items: []corev1.Pod{p0, p1}}, next: "abc"},
		{name: "last page", list: corev1.PodList{Items: []corev1.Pod{p1}}},
		{name: "no pods", list: corev1.PodList{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.list.Kind, tt.list.APIVersion = "PodList", "v1"
			raw, err := json.Marshal(tt.list)
			if err != nil {
				t.Fatal(err)
			}
			var got []corev1.Pod
			next, err := decodePodPage(bytes.NewReader(raw), func(p *corev1.Pod) { got = append(got, *p) })
			if err != nil || next != tt.next {
				t.Fatalf("decodePodPage = %q, %v; want %q", next, err, tt.next)
			}
			if len(got) != len(tt.list.Items) {
				t.Fatalf("%d pods, want %d", len(got), len(tt.list.Items))
			}
			for i := range got {
				want := trimPod(&tt.list.Items[i])
				if !equality.Semantic.DeepEqual(&got[i], want) {
					t.Errorf("pod %d = %+v, want %+v", i, got[i], want)
				}
				if len(got[i].Spec.Containers) > 0 || len(got[i].Annotations) > 0 || len(got[i].OwnerReferences) > 1 {
					t.Errorf("pod %d keeps more than a count reads: %+v", i, got[i].ObjectMeta)
				}
			}
		})
	}
	for _, bad := range []string{`[]`, `{"items":{}}`, `{"items":[{"metadata":1}]}`, `{"items":[`} {
		if _, err := decodePodPage(strings.NewReader(bad), func(*corev1.Pod) {}); err == nil {
			t.Errorf("decodePodPage(%s): no error", bad)
		}
	}
}
