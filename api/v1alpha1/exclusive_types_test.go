package v1alpha1

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExclusivePorts(t *testing.T) {
	ports := []ServicePort{{Name: "write", Port: 5432}, {Name: "read", Port: 5433}}
	tests := []struct {
		name      string
		exclusive *Exclusive
		ports     []ServicePort
		want      []string // Lease names of resource db
	}{
		{"none", nil, ports, nil},
		{"every port", &Exclusive{}, ports, []string{"swh.db.write", "swh.db.read"}},
		{"named", &Exclusive{Ports: []string{"write"}}, ports, []string{"swh.db.write"}},
		{"a single unnamed port goes by its number", &Exclusive{}, []ServicePort{{Port: 5432}}, []string{"swh.db.5432"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := ServiceWithHealthchecksSpec{Ports: tt.ports, Exclusive: tt.exclusive}
			var got []string
			for _, p := range spec.ExclusivePorts() {
				got = append(got, ExclusiveLeaseName("db", p))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestExclusiveLeaseHelpers(t *testing.T) {
	node, seconds, now := "node-a", int32(6), metav1.NewMicroTime(time.Now())
	held := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationHolderPod: "db-0", AnnotationExclusivePort: "write"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now},
	}
	if got := ExclusiveLeaseHolder(held); got != node {
		t.Errorf("holder %q, want %q", got, node)
	}
	if got := ExclusiveLeaseDuration(held); got != 6*time.Second {
		t.Errorf("duration %s, want 6s", got)
	}
	free := FreedExclusiveLease(held)
	if ExclusiveLeaseHolder(free) != "" || free.Spec.RenewTime != nil || free.Spec.AcquireTime != nil ||
		free.Annotations[AnnotationHolderPod] != "" || free.Annotations[AnnotationExclusivePort] != "write" {
		t.Errorf("freed Lease %+v: want no holder, times or holder pod, the port kept", free)
	}
	if ExclusiveLeaseHolder(held) != node || held.Annotations[AnnotationHolderPod] != "db-0" {
		t.Error("freeing changed the Lease it was given")
	}
	if ExclusiveLeaseHolder(nil) != "" || ExclusiveLeaseDuration(&coordinationv1.Lease{}) != DefaultExclusiveLeaseSeconds*time.Second {
		t.Error("a nil or empty Lease: want no holder and the default duration")
	}
}
