package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMaintenance(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		// out lists the ports taken out among web, admin and "" (an
		// unnamed port); nil for a pod not in maintenance.
		out []string
	}{
		{name: "no annotation"},
		{name: "another annotation", annotations: map[string]string{"example.com/maintenance": ""}},
		{name: "empty", annotations: map[string]string{AnnotationMaintenance: ""}, out: []string{"web", "admin", ""}},
		{name: "star", annotations: map[string]string{AnnotationMaintenance: "*"}, out: []string{"web", "admin", ""}},
		{name: "blank", annotations: map[string]string{AnnotationMaintenance: "  "}, out: []string{"web", "admin", ""}},
		{name: "one port", annotations: map[string]string{AnnotationMaintenance: "web"}, out: []string{"web"}},
		{name: "two ports, spaces", annotations: map[string]string{AnnotationMaintenance: " web , admin,"}, out: []string{"web", "admin"}},
		{name: "a star among names", annotations: map[string]string{AnnotationMaintenance: "web,*"}, out: []string{"web", "admin", ""}},
		{name: "unknown port", annotations: map[string]string{AnnotationMaintenance: "metrics"}, out: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			out := Maintenance(pod)
			if (out == nil) != (tc.out == nil) {
				t.Fatalf("in maintenance: %v, want %v", out != nil, tc.out != nil)
			}
			if out == nil {
				return
			}
			want := map[string]bool{}
			for _, p := range tc.out {
				want[p] = true
			}
			for _, port := range []string{"web", "admin", ""} {
				if out(port) != want[port] {
					t.Errorf("port %q taken out: %v, want %v", port, out(port), want[port])
				}
			}
		})
	}
}
