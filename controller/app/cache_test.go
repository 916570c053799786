package app

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestTrimNode(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"topology.kubernetes.io/zone": "a"}, ManagedFields: mf},
		Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{
			Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}},
			Images:          []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1}},
			VolumesInUse:    []corev1.UniqueVolumeName{"kubernetes.io/csi/vol"},
			VolumesAttached: []corev1.AttachedVolume{{Name: "kubernetes.io/csi/vol"}},
			NodeInfo:        corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
			Capacity:        corev1.ResourceList{},
		},
	}
	out, err := trimNode(n)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Node)
	if got.ManagedFields != nil || got.Status.Images != nil || got.Status.VolumesInUse != nil || got.Status.VolumesAttached != nil ||
		got.Status.NodeInfo.KubeletVersion != "" || got.Status.Capacity != nil {
		t.Errorf("not trimmed: %+v", got)
	}
	if got.Labels["topology.kubernetes.io/zone"] != "a" || len(got.Status.Conditions) != 1 || len(got.Status.Addresses) != 1 || len(got.Spec.PodCIDRs) != 1 {
		t.Errorf("trimmed too much: %+v", got)
	}

	meta := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"}, ManagedFields: mf}}
	if out, err := trimNode(meta); err != nil || out.(*metav1.PartialObjectMetadata).ManagedFields != nil || out.(*metav1.PartialObjectMetadata).Labels["a"] != "b" {
		t.Errorf("metadata-only node: %+v, %v", out, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: n}
	if out, err := trimNode(tomb); err != nil || out != any(tomb) {
		t.Errorf("a tombstone: %+v, %v", out, err)
	}
}
